"""The ``annotate`` rule: what it types, from where, and what it declines (whole outputs)."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules.annotate import Annotate
from tsfix.codemods.rules.base import Observations
from tsfix.codemods.rules.variable_arguments import VariableArguments

BLOCKERS = Path(__file__).resolve().parent.parent / "fixtures" / "check" / "blockers.py"


def _rewrite(code: str, *, observed: Observations | None = None,
             unsafe: bool = False) -> Rewrite:
    return rewrite_source(
        code,
        RewriteSettings([Annotate], unsafe_fixes=unsafe),
        FileContext("model.py", observed=observed),
    )


def _findings(result: Rewrite) -> list[tuple[str, int, str]]:
    """(code, line, "fixed" or the refusal's reason) for every site annotate reported."""
    found = [(f.code, f.line, "fixed") for f in result.fixes]
    found += [(s.code, s.line, s.reason) for s in result.skips if s.code]
    return sorted(found)


HEADER = "import torch\nfrom torch import nn\n\n\n"

TOPK = HEADER + textwrap.dedent("""\
    class TopK(nn.Module):
        def forward(self, x, k, gain=None):
            if gain is not None:
                x = x * gain
            return x.topk(k, dim=-1).values
    """)

HOOK = HEADER + textwrap.dedent("""\
    class Hook(nn.Module):
        def forward(self, x, state=None):
            return x, state
    """)

STATE_REFUSED = ("forward(): state=None: neither its uses nor an example call tell its type; "
                 "left unannotated (TorchScript takes it for a Tensor)")


def test_without_observations_an_undecidable_none_default_is_left_and_refused() -> None:
    result = _rewrite(HOOK)
    assert result.text == HOOK
    assert [s.reason for s in result.skips] == [STATE_REFUSED]
    assert _findings(result) == [("TSF207", 6, STATE_REFUSED)]


def test_a_none_default_in_arithmetic_with_a_tensor_is_an_optional_tensor() -> None:
    # Unannotated, ``gain=None`` is a Tensor whose default is an undefined tensor: the scripted
    # forward fails when called without it. Nothing else says what gain is, so the arithmetic
    # with the tensor decides (an example call passing a float would win: next test).
    result = _rewrite(TOPK)
    assert result.text == "from typing import Optional\n\n" + TOPK.replace(
        "x, k, gain=None", "x, k: int, gain: Optional[torch.Tensor] = None")
    assert _findings(result) == [("TSF207", 6, "fixed")]
    assert [c.summary for c in result.changes] == [
        "typed 2 parameter(s) (0 from observed calls, 2 from the code)"]


def test_a_none_default_added_to_an_unpacked_chunk_is_an_optional_tensor() -> None:
    """g-mlp's SpatialGatingUnit: ``res, gate = x.chunk(2, dim=-1)`` types both names as
    tensors (chunk, split and unbind give a List[Tensor]), so ``gate + gate_res`` under
    ``is not None`` says what gate_res is."""
    code = textwrap.dedent("""\
        import torch
        from torch import nn


        class SpatialGatingUnit(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.norm = nn.LayerNorm(dim // 2)

            def forward(self, x, gate_res=None):
                res, gate = x.chunk(2, dim=-1)
                gate = self.norm(gate)
                if gate_res is not None:
                    gate = gate + gate_res
                return gate * res
        """)
    result = _rewrite(code)
    assert result.text == "from typing import Optional\n\n" + code.replace(
        "x, gate_res=None", "x, gate_res: Optional[torch.Tensor] = None")
    assert _findings(result) == [("TSF207", 10, "fixed")]


def test_a_none_default_re_bound_from_itself_is_typed_by_its_other_uses() -> None:
    """axial-attention's ``kv = x if kv is None else kv``: the example calls only ever passed
    None (observed ``None``), and the re-binding says what kv becomes, not what it is given;
    the layer it feeds says Tensor."""
    code = textwrap.dedent("""\
        import torch
        from torch import nn


        class SelfAttention(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.to_kv = nn.Linear(dim, 2 * dim)

            def forward(self, x, kv=None):
                kv = x if kv is None else kv
                return self.to_kv(kv)
        """)
    observed = {"SelfAttention": {"forward": {"x": "Tensor", "kv": "None"}}}
    for seen in (observed, None):
        result = _rewrite(code, observed=seen)
        assert result.text == "from typing import Optional\n\n" + code.replace(
            "x, kv=None", "x, kv: Optional[torch.Tensor] = None"), seen


def test_observed_types_fill_what_the_code_cannot_tell() -> None:
    observed = {"TopK": {"forward": {"k": "int", "gain": "Optional[float]"}}}
    result = _rewrite(TOPK, observed=observed)
    assert result.text == "from typing import Optional\n\n" + TOPK.replace(
        "x, k, gain=None", "x, k: int, gain: Optional[float] = None")
    assert not result.skips
    assert _findings(result) == [("TSF207", 6, "fixed")]
    assert [c.summary for c in result.changes] == [
        "typed 2 parameter(s) (2 from observed calls, 0 from the code)"]


SCALE = HEADER + textwrap.dedent("""\
    class Scale(nn.Module):
        def forward(self, x, factor=None, offset=1):
            if factor is not None and factor > 1:
                x = x * 2
            return x + offset
    """)


def test_observed_types_win_over_the_code_when_they_disagree() -> None:
    static = _rewrite(SCALE)
    assert static.text == "from typing import Optional\n\n" + SCALE.replace(
        "factor=None, offset=1", "factor: Optional[int] = None, offset: int = 1")
    observed = {"Scale": {"forward": {"factor": "Optional[float]", "offset": "float"}}}
    result = _rewrite(SCALE, observed=observed)
    assert result.text == "from typing import Optional\n\n" + SCALE.replace(
        "factor=None, offset=1", "factor: Optional[float] = None, offset: float = 1")


def test_weak_evidence_does_not_type_a_parameter_without_default() -> None:
    # x * 0.5 and x > 1 fit a Tensor as well as a float.
    code = HEADER + textwrap.dedent("""\
        class Gate(nn.Module):
            def forward(self, x, threshold):
                return (x * 0.5) * (threshold > 1)
        """)
    result = _rewrite(code)
    assert not result.changed
    assert result.text == code


def test_a_parameter_observed_as_a_tensor_stays_unannotated() -> None:
    code = HEADER + textwrap.dedent("""\
        class Add(nn.Module):
            def forward(self, x, bias):
                return x + bias
        """)
    observed = {"Add": {"forward": {"bias": "Tensor"}}}
    result = _rewrite(code, observed=observed)
    assert not result.changed
    assert result.text == code


# Compiled methods' *args/**kwargs/keyword-only parameters: tests/test_variable_arguments.py.


def test_keyword_only_without_default_after_a_default_is_declined() -> None:
    code = HEADER + textwrap.dedent("""\
        class Mix(nn.Module):
            def forward(self, x, alpha=0.5, *, other):
                return x * alpha + other
        """)
    result = rewrite_source(code, RewriteSettings([VariableArguments, Annotate]), "model.py")
    assert result.text == code.replace("alpha=0.5", "alpha: float = 0.5")
    # Keyword-only parameters without defaults script: a note, not a blocker.
    assert [(s.code, s.reason) for s in result.skips] == [
        (None, "forward(): keyword-only parameters without defaults follow parameters with "
               "defaults; they cannot become ordinary parameters")]


def test_a_mutated_list_default_becomes_optional_with_a_fill_in() -> None:
    code = HEADER + textwrap.dedent("""\
        class Pad(nn.Module):
            def forward(self, x, widths=[0, 1]):
                widths.append(0)
                return x.sum() + len(widths)
        """)
    result = _rewrite(code)
    assert result.text == "from typing import List, Optional\n\n" + (
        HEADER + textwrap.dedent("""\
        class Pad(nn.Module):
            def forward(self, x, widths: Optional[List[int]] = None):
                if widths is None:
                    widths = [0, 1]
                widths.append(0)
                return x.sum() + len(widths)
        """))
    assert _findings(result) == [("TSF209", 6, "fixed")]


def test_defaults_annotate_cannot_repair_are_refused_with_their_reason() -> None:
    code = textwrap.dedent("""\
        from typing import List, Optional

        import torch
        from torch import nn


        class Odd(nn.Module):
            def forward(self, x, a: Optional[List[int]] = [1], b={1, 2}, c: 'int' = None):
                return x
        """)
    result = _rewrite(code)
    assert result.text == code
    assert _findings(result) == [
        ("TSF208", 8, "forward(): c's annotation is a string; left as it is"),
        ("TSF209", 8, "forward(): a is Optional already, so None cannot stand for its "
                      "default; left as it is"),
        ("TSF209", 8, "forward(): cannot tell the type of b's default `{1, 2}`; left "
                      "unannotated")]


def test_an_optional_attribute_read_without_a_test_is_not_declared() -> None:
    code = HEADER + textwrap.dedent("""\
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
        """)
    result = _rewrite(code)
    assert result.text == code
    assert [s.reason for s in result.skips] == [
        "self.shift may be None and is read without an `is not None` test in a compiled "
        "method (or assigned there); not refined"]


def test_typing_names_join_the_existing_import() -> None:
    code = textwrap.dedent("""\
        from typing import List

        import torch
        from torch import nn


        class Head(nn.Module):
            def forward(self, x, dims=(1, 2), eps=None):
                if eps is None:
                    eps = 1e-5
                return x / (x.std() + eps)
        """)
    result = _rewrite(code)
    assert result.text == code.replace(
        "from typing import List\n", "from typing import List, Optional, Tuple\n").replace(
        "dims=(1, 2), eps=None", "dims: Tuple[int, int] = (1, 2), eps: Optional[float] = None")


def test_methods_outside_forward_are_not_touched() -> None:
    code = HEADER + textwrap.dedent("""\
        class Model(nn.Module):
            def forward(self, x):
                return x

            def configure(self, lr=0.1, betas=(0.9, 0.99)):
                return lr, betas
        """)
    result = _rewrite(code)
    assert result.text == code
    assert result.fixes == [] and result.skips == []


def test_ignored_helpers_and_eager_only_calls_are_left_untouched() -> None:
    # dump is @torch.jit.ignore; log is called only where TorchScript never compiles.
    code = HEADER + textwrap.dedent("""\
        class Debug(nn.Module):
            def forward(self, x, gain=2.0):
                if not torch.jit.is_scripting():
                    self.log(x, level=1)
                return self.dump(x) * gain

            @torch.jit.ignore
            def dump(self, x, path='out.txt', sizes=[1]):
                return x

            def log(self, x, level=0, tags=None):
                print(level, tags)
        """)
    result = _rewrite(code)
    assert result.text == code.replace("gain=2.0", "gain: float = 2.0")
    assert _findings(result) == [("TSF206", 6, "fixed")]
    assert result.skips == []


def test_an_exported_method_is_annotated_like_forward() -> None:
    code = HEADER + textwrap.dedent("""\
        class Pool(nn.Module):
            def forward(self, x):
                return x

            @torch.jit.export
            def pool(self, x, k, sizes=[2, 4], *, eps=1e-5):
                return x.view(sizes).topk(k).values + eps
        """)
    result = _rewrite(code)
    assert result.text == "from typing import Tuple\n\n" + code.replace(
        "x, k, sizes=[2, 4], *, eps=1e-5",
        "x, k: int, sizes: Tuple[int, int] = (2, 4), *, eps: float = 1e-5")
    assert _findings(result) == [("TSF206", 10, "fixed"), ("TSF209", 10, "fixed")]


# ---- tsfix check: annotate's findings -----------------------------------------------------------

# blockers.py: the class of each annotate code -> how annotate answers it.
BLOCKER_ANSWERS = {
    "UnannotatedDefault": ("TSF206", "fixed"),
    # ``x = x * scale``: an Optional[Tensor] (an example call passing a float would say float).
    "UntypedNoneDefault": ("TSF207", "fixed"),
    "NoneDefaultNotOptional": ("TSF208", "fixed"),
    "MutableDefault": ("TSF209", "fixed"),
    "OptionalNotRefined": ("TSF228", "fixed"),
    "NoneInitialisedLocal": ("TSF229", "fixed"),
}


def test_each_blocker_class_is_reported_once_fixed_or_refused() -> None:
    result = rewrite_source(
        BLOCKERS.read_text(), RewriteSettings([Annotate], output=False), "blockers.py"
    )
    answers = {f.class_name: (f.code, "fixed") for f in result.fixes}
    refusals = [s for s in result.skips if s.code]
    answers.update((s.class_name, (s.code, s.reason)) for s in refusals)
    assert len(result.fixes) + len(refusals) == len(BLOCKER_ANSWERS)
    assert answers == BLOCKER_ANSWERS


def test_check_prints_annotates_refusal_instead_of_promising_a_fix() -> None:
    # Issue 14: `mask=None` that annotate cannot type must not be reported as fixable by it.
    findings = [f for f in check_source(HOOK, "model.py") if f.code == "TSF207"]
    assert [(f.line, f.fix, f.refused) for f in findings] == [
        (6, None, f"annotate: {STATE_REFUSED}")]


# ---- idempotence and the embedded examples ------------------------------------------------------

def test_rewrites_are_idempotent_on_the_fixtures() -> None:
    fixtures = Path(__file__).resolve().parent.parent / "fixtures" / "annotate"
    paths = sorted(fixtures.glob("*.in.py"))
    assert len(paths) >= 5
    for path in paths:
        once = rewrite_source(
            path.read_text(), RewriteSettings([Annotate], unsafe_fixes=True), path.name
        )
        twice = rewrite_source(once.text, RewriteSettings([Annotate], unsafe_fixes=True), path.name)
        assert twice.text == once.text, path.name


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(Annotate.INVALID)))
def test_every_embedded_rewrite_scripts(index: int, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    after = Annotate.INVALID[index].after
    assert after is not None
    path = tmp_path / f"example_{index}.py"
    path.write_text(
        rewrite_source(after, RewriteSettings([Annotate], unsafe_fixes=True), path.name).text
    )
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


def test_keyword_only_parameters_are_reordered_by_default_when_made_ordinary() -> None:
    # Seen in ParityBench: ``*, context_mask=None, context`` made ordinary as it stood would put
    # ``context`` after a default (CSTValidationError, and the file's rewrites were lost).
    code = HEADER + textwrap.dedent("""\
        class CrossAttention(nn.Module):
            def forward(self, x, *, context_mask=None, context, scale=2.0):
                if context_mask is not None:
                    x = x * context_mask
                return x * scale + context
        """)
    result = rewrite_source(code, RewriteSettings([VariableArguments, Annotate]), "model.py")
    assert ("def forward(\n        self,\n        x,\n        context,\n"
            "        context_mask: Optional[torch.Tensor] = None,\n"
            "        scale: float = 2.0,\n    ):") in result.text
    assert not any("internal error" in s.reason for s in result.skips)
    # Every keyword call binds as before.
    namespace: dict[str, object] = {}
    exec(compile(result.text, "model.py", "exec"), namespace)
    import torch

    module = namespace["CrossAttention"]()  # type: ignore[operator]
    x, context = torch.ones(2), torch.full((2,), 3.0)
    assert torch.equal(module(x, context=context), x * 2.0 + context)  # type: ignore[operator]


def test_an_empty_tuple_default_is_left_unannotated() -> None:
    code = HEADER + textwrap.dedent("""\
        class Pool(nn.Module):
            def forward(self, x, dims=(), keep=False):
                return x
        """)
    result = _rewrite(code)
    assert "dims=()" in result.text and "Tuple[]" not in result.text
    assert "keep: bool = False" in result.text


def _scripted_module(code: str, class_name: str, tmp_path: Path,
                     **init: object) -> tuple[object, object]:
    """The eager instance of ``class_name(**init)`` from ``code`` and its torch.jit.script
    (which needs the source in a file)."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "model_under_test.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    eager = getattr(module, class_name)(**init).eval()
    return eager, torch.jit.script(eager)


# ---- types from the callee and refinement (issue 18 items 3 and 2) ---------------------------

RNN = HEADER + textwrap.dedent("""\
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(4, 8, batch_first=True)
            self.gru = nn.GRU(4, 8, batch_first=True)

        def forward(self, x, hx=None, h0=None):
            out, state = self.lstm(x, hx)
            out2, _ = self.gru(x, hx=h0)
            return out + out2
    """)


def test_a_none_default_passed_to_a_recurrent_layer_takes_its_state_type() -> None:
    result = _rewrite(RNN)
    assert ("def forward(\n        self,\n        x,\n"
            "        hx: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,\n"
            "        h0: Optional[torch.Tensor] = None,\n    ):") in result.text
    assert _findings(result) == [("TSF207", 11, "fixed")] * 2


@pytest.mark.slow
def test_the_recurrent_wrapper_scripts_with_and_without_a_state(tmp_path: Path) -> None:
    import torch

    module, scripted = _scripted_module(_rewrite(RNN).text, "Wrapper", tmp_path)
    x = torch.randn(2, 3, 4)
    state = (torch.randn(1, 2, 8), torch.randn(1, 2, 8))
    torch.testing.assert_close(scripted(x), module(x), rtol=1e-4, atol=1e-5)  # type: ignore[operator]
    torch.testing.assert_close(scripted(x, state, state[0]),  # type: ignore[operator]
                               module(x, state, state[0]), rtol=1e-4, atol=1e-5)  # type: ignore[operator]


def test_a_parameter_passed_on_takes_the_callees_annotation_or_the_one_just_given() -> None:
    code = "import torch\nfrom torch import nn\n\n\n" + textwrap.dedent("""\
        def shift(x, offset: int):
            return x.roll(offset, -1)


        class Shifter(nn.Module):
            def forward(self, x, offset=None, scale=None):
                if offset is not None:
                    x = shift(x, offset)
                return self.scaled(x, scale)

            def scaled(self, x, scale=None):
                if scale is None:
                    scale = x.size(-1) ** -0.5
                return x * scale
        """)
    result = _rewrite(code)
    assert "def forward(self, x, offset: Optional[int] = None, scale: Optional[float] = None)" \
        in result.text
    assert "def scaled(self, x, scale: Optional[float] = None)" in result.text
    # The callee was annotated first, but the summary still lists forward's part first.
    assert [c.summary for c in result.changes] == [
        "typed 3 parameter(s) (0 from observed calls, 3 from the code)"]


def test_a_keyword_passed_to_multihead_attention_is_an_optional_tensor() -> None:
    code = HEADER + textwrap.dedent("""\
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = nn.MultiheadAttention(8, 2)

            def forward(self, x, pad=None, flag=None):
                out, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=flag)
                return out
        """)
    result = _rewrite(code)
    assert ("pad: Optional[torch.Tensor] = None, flag: Optional[bool] = None"
            in result.text)


def test_a_product_with_a_number_passed_as_a_tensor_makes_a_tensor() -> None:
    code = "import torch\nfrom torch import nn\n\n\n" + textwrap.dedent("""\
        def to_mask(lengths: torch.Tensor, n: int):
            return torch.arange(n)[None, :] < lengths[:, None]


        class Pool(nn.Module):
            def forward(self, x, lengths=None):
                if lengths is not None:
                    x = x * to_mask(lengths * x.size(1), x.size(1)).unsqueeze(-1)
                return x.mean(1)
        """)
    assert "lengths: Optional[torch.Tensor] = None" in _rewrite(code).text


def test_a_float_vote_outweighs_arithmetic_with_a_tensor() -> None:
    # ``x * scale`` fits a float as well: the assignment of a float decides.
    code = HEADER + textwrap.dedent("""\
        class Scaled(nn.Module):
            def forward(self, x, scale=None):
                if scale is None:
                    scale = 0.5
                return x * scale
        """)
    assert "scale: Optional[float] = None" in _rewrite(code).text


SKIP = HEADER + textwrap.dedent("""\
    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x, skip=None):
            # join the encoder's features
            x = self.proj(x) + skip
            return x * skip.sigmoid()
    """)


def test_an_optional_used_without_a_test_gets_an_assert_before_its_first_use() -> None:
    result = _rewrite(SKIP)
    assert result.text == "from typing import Optional\n\n" + SKIP.replace(
        "skip=None", "skip: Optional[torch.Tensor] = None").replace(
        "        # join the encoder's features\n",
        "        # join the encoder's features\n        assert skip is not None\n")
    assert _findings(result) == [("TSF207", 10, "fixed"), ("TSF228", 12, "fixed")]


@pytest.mark.slow
def test_the_assert_keeps_eager_results_and_makes_the_class_script(tmp_path: Path) -> None:
    import torch

    module, scripted = _scripted_module(_rewrite(SKIP).text, "Up", tmp_path)
    x, skip = torch.randn(2, 4), torch.randn(2, 4)
    torch.testing.assert_close(scripted(x, skip), module(x, skip), rtol=1e-4, atol=1e-5)  # type: ignore[operator]
    with pytest.raises(AssertionError):     # eager code failed on None before, too
        module(x)  # type: ignore[operator]


def test_an_optional_whose_use_only_some_paths_evaluate_is_left_unannotated() -> None:
    # An assert before the statement would fail calls that never evaluate the use: refused
    # instead (unannotated, it still compiles, as a Tensor).
    code = HEADER + textwrap.dedent("""\
        class Choose(nn.Module):
            def forward(self, x, n: int, skip=None):
                x = x + skip if n > 0 else x
                return x
        """)
    result = _rewrite(code)
    assert "skip=None" in result.text and "assert" not in result.text
    assert [(s.code, s.line) for s in result.skips] == [("TSF207", 6)]
    assert "an assert cannot be added" in result.skips[0].reason


def test_an_optional_used_in_a_loop_gets_the_assert_inside_the_loop() -> None:
    # Before the loop it would fail calls that never enter it; inside, the use runs whenever
    # the assert does.
    code = HEADER + textwrap.dedent("""\
        class Loop(nn.Module):
            def forward(self, x, n: int, skip=None):
                for i in range(n):
                    x = x + skip
                return x
        """)
    result = _rewrite(code)
    assert result.text == "from typing import Optional\n\n" + code.replace(
        "skip=None", "skip: Optional[torch.Tensor] = None").replace(
        "            x = x + skip\n", "            assert skip is not None\n"
        "            x = x + skip\n")
    assert _findings(result) == [("TSF207", 6, "fixed"), ("TSF228", 8, "fixed")]


def test_a_user_annotated_optional_gets_the_assert_too() -> None:
    code = "from typing import Optional\n\n" + HEADER + textwrap.dedent("""\
        class Res(nn.Module):
            def forward(self, x, skip: Optional[torch.Tensor] = None):
                return x + skip
        """)
    result = _rewrite(code)
    assert "        assert skip is not None\n        return x + skip\n" in result.text
    assert _findings(result) == [("TSF228", 9, "fixed")]


def test_a_tested_optional_gets_no_assert() -> None:
    result = _rewrite(TOPK)
    assert "assert" not in result.text


# ---- Optionals the user annotated, and None defaults used as tensors (issue 27 item 2) ------

OPTIONAL_HEADER = "from typing import Optional\n\n" + HEADER

STAGE = OPTIONAL_HEADER + textwrap.dedent("""\
    class DecoderStage(nn.Module):
        def __init__(self, empty=False):
            super().__init__()
            self.empty = empty
            self.proj = nn.Linear(4, 4)

        def forward(self, x, skip: Optional[torch.Tensor] = None):
            x = self.proj(x)
            if not self.empty:
                # the encoder's features
                x = x + skip
                x = x * torch.sigmoid(skip)
            return torch.relu(x) - skip.mean()
    """)


def test_an_optional_used_under_a_setting_gets_the_assert_in_that_branch() -> None:
    # One assert refines the uses after it in its block; a use after the branch needs its own
    # (an assert before the `if` would fail the empty configuration, which never reads skip
    # there).
    result = _rewrite(STAGE)
    assert result.text == STAGE.replace(
        "            # the encoder's features\n",
        "            # the encoder's features\n            assert skip is not None\n").replace(
        "        return torch.relu(x)", "        assert skip is not None\n"
        "        return torch.relu(x)")
    assert _findings(result) == [("TSF228", 17, "fixed"), ("TSF228", 19, "fixed")]


def test_a_submodule_class_defined_later_types_nothing_so_a_second_run_changes_nothing(
) -> None:
    # transformers' DebertaV2Attention builds DebertaV2SelfAttention, defined after it: its
    # forward types are decided only later in the pass (a second run would type the caller).
    code = HEADER + textwrap.dedent("""\
        from typing import Optional


        class Outer(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Inner()

            def forward(self, x, mask=None):
                return self.inner(x, mask=mask)


        class Inner(nn.Module):
            def forward(self, x, mask: Optional[torch.Tensor] = None):
                if mask is not None:
                    x = x * mask
                return x
        """)
    assert _rewrite(code).text == code
    outer, inner = code.split("class Outer")[1].split("class Inner")
    callee_first = (code.split("class Outer")[0] + "class Inner" + inner.rstrip() + "\n\n\n"
                    + "class Outer" + outer.rstrip() + "\n")
    # Defined before the caller, the callee's forward types it.
    assert ("    def forward(self, x, mask: Optional[torch.Tensor] = None):\n"
            "        return self.inner") in _rewrite(callee_first).text


def test_an_assert_that_the_value_is_none_elsewhere_refines_nothing() -> None:
    # demucs' HDecLayer: `x = x + skip` when not empty, `assert skip is None` when empty.
    code = HEADER + textwrap.dedent("""\
        from typing import Optional


        class Dec(nn.Module):
            def __init__(self, empty=False):
                super().__init__()
                self.empty = empty

            def forward(self, x, skip: Optional[torch.Tensor]):
                if not self.empty:
                    x = x + skip
                else:
                    assert skip is None
                return x
        """)
    result = _rewrite(code)
    assert result.text == code.replace(
        "            x = x + skip\n", "            assert skip is not None\n"
        "            x = x + skip\n")


def test_a_none_test_that_only_raises_elsewhere_refines_nothing() -> None:
    # torchaudio's _HDecLayer: `x = x + skip` when not empty, `if skip is not None: raise`
    # when empty.
    code = HEADER + textwrap.dedent("""\
        from typing import Optional


        class Dec(nn.Module):
            def __init__(self, empty=False):
                super().__init__()
                self.empty = empty

            def forward(self, x, skip: Optional[torch.Tensor]):
                if not self.empty:
                    x = x + skip
                else:
                    if skip is not None:
                        raise ValueError("skip must be None when empty")
                return x
        """)
    result = _rewrite(code)
    assert result.text == code.replace(
        "            x = x + skip\n", "            assert skip is not None\n"
        "            x = x + skip\n")
    # A test with an else, or a body that goes on, is the user's own refinement.
    kept = code.replace('raise ValueError("skip must be None when empty")', "x = x + 1")
    assert _rewrite(kept).text == kept


@pytest.mark.slow
def test_the_asserts_in_a_branch_keep_eager_results_and_script(tmp_path: Path) -> None:
    import torch

    code = _rewrite(STAGE).text
    x, skip = torch.randn(2, 4), torch.randn(2, 4)
    for empty in (False, True):
        module, scripted = _scripted_module(code, "DecoderStage", tmp_path, empty=empty)
        torch.testing.assert_close(scripted(x, skip), module(x, skip), rtol=1e-4, atol=1e-5)  # type: ignore[operator]
        with pytest.raises(AssertionError):     # eager code failed on None before, too
            module(x)  # type: ignore[operator]


LOCALS = OPTIONAL_HEADER + textwrap.dedent("""\
    class Gates(nn.Module):
        gate: Optional[torch.Tensor]

        def __init__(self, gated=True):
            super().__init__()
            self.gated = gated
            self.gate = nn.Parameter(torch.zeros(4)) if gated else None
            self.bias = nn.Parameter(torch.ones(4)) if gated else None

        def forward(self, x, n: int):
            gate = self.gate
            if self.gated:
                x = x * torch.sigmoid(gate)
                gate = self.bias
                x = x + gate
            prev: Optional[torch.Tensor] = None
            for i in range(n):
                prev = x * i
            return x - prev
    """)


def test_optional_locals_get_the_assert_before_their_uses() -> None:
    # A copy of an attribute declared Optional (or set to None by __init__), and a local
    # annotated Optional; a rebinding between two uses needs a second assert.
    result = _rewrite(LOCALS)
    assert result.text == LOCALS.replace(
        "            x = x * torch.sigmoid(gate)\n",
        "            assert gate is not None\n            x = x * torch.sigmoid(gate)\n").replace(
        "            x = x + gate\n", "            assert gate is not None\n"
        "            x = x + gate\n").replace(
        "        return x - prev\n", "        assert prev is not None\n        return x - prev\n")
    assert _findings(result) == [("TSF228", 19, "fixed"), ("TSF228", 21, "fixed"),
                                 ("TSF228", 25, "fixed")]


@pytest.mark.slow
def test_the_asserted_locals_script_with_eager_results(tmp_path: Path) -> None:
    import torch

    code = _rewrite(LOCALS).text
    x = torch.randn(2, 4)
    for gated in (True, False):
        module, scripted = _scripted_module(code, "Gates", tmp_path, gated=gated)
        torch.testing.assert_close(scripted(x, 2), module(x, 2), rtol=1e-4, atol=1e-5)  # type: ignore[operator]


def test_a_user_annotated_optional_no_assert_can_refine_is_reported() -> None:
    code = OPTIONAL_HEADER + textwrap.dedent("""\
        class Choose(nn.Module):
            def forward(self, x, n: int, skip: Optional[torch.Tensor] = None):
                return x + skip if n > 0 else x
        """)
    result = _rewrite(code)
    assert result.text == code
    assert [(s.code, s.line) for s in result.skips] == [("TSF228", 9)]
    assert "only some paths of its statement evaluate it" in result.skips[0].reason


ATTENTION = HEADER + textwrap.dedent("""\
    class Attention(nn.Module):
        def __init__(self, dim=8):
            super().__init__()
            self.qkv = nn.Linear(dim, dim * 3)
            self.scale = dim ** -0.5

        def forward(self, x, mask=None):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            att = (q @ k.transpose(-2, -1)) * self.scale
            if mask is not None:
                att = att.masked_fill(mask, float("-inf"))
            return att.softmax(-1) @ v


    class Pick(nn.Module):
        def forward(self, x, index=None):
            scores = torch.einsum("bi,bj->bij", x, x)
            return scores.gather(1, index)
    """)


def test_a_none_default_given_to_a_tensor_method_of_an_untyped_local_is_optional() -> None:
    # The typer cannot tell what `att` (a product of unpacked chunks) or `scores` (einsum) is,
    # but in compiled code only tensors have masked_fill and gather.
    result = _rewrite(ATTENTION)
    assert result.text == "from typing import Optional\n\n" + ATTENTION.replace(
        "mask=None", "mask: Optional[torch.Tensor] = None").replace(
        "index=None", "index: Optional[torch.Tensor] = None").replace(
        "        return scores.gather(1, index)\n",
        "        assert index is not None\n        return scores.gather(1, index)\n")
    assert _findings(result) == [("TSF207", 11, "fixed"), ("TSF207", 20, "fixed"),
                                 ("TSF228", 22, "fixed")]


def test_a_method_of_an_attribute_or_imported_name_tells_nothing() -> None:
    # `self.bank` could be any object with a gather method (not compiled code's tensors).
    code = HEADER + textwrap.dedent("""\
        class Lookup(nn.Module):
            def forward(self, x, index=None):
                return self.bank.gather(1, index)
        """)
    result = _rewrite(code)
    assert result.text == code
    assert [s.code for s in result.skips if s.code] == ["TSF207"]


@pytest.mark.slow
def test_the_typed_mask_lets_the_scripted_attention_run_without_it(tmp_path: Path) -> None:
    # Unannotated, the scripted forward failed without a mask ("Expected a proper Tensor but
    # got None").
    import torch

    module, scripted = _scripted_module(_rewrite(ATTENTION).text, "Attention", tmp_path)
    x, mask = torch.randn(2, 5, 8), torch.rand(2, 5, 5) > 0.7
    torch.testing.assert_close(scripted(x), module(x), rtol=1e-4, atol=1e-5)  # type: ignore[operator]
    torch.testing.assert_close(scripted(x, mask), module(x, mask), rtol=1e-4, atol=1e-5)  # type: ignore[operator]


def test_a_type_from_the_type_table_types_a_none_default_and_refines_it() -> None:
    # The type the repair loop reads from the compiler's message reaches annotate as an
    # observed type: the None default becomes Optional of it, and its use gets the assert.
    code = HEADER + textwrap.dedent("""\
        class Shift(nn.Module):
            def __init__(self, shifted=True):
                super().__init__()
                self.shifted = shifted

            def forward(self, x, offset=None):
                if self.shifted:
                    x = x + offset
                return x
        """)
    result = _rewrite(code, observed={"Shift": {"forward": {"offset": "float"}}})
    assert result.text == "from typing import Optional\n\n" + code.replace(
        "offset=None", "offset: Optional[float] = None").replace(
        "            x = x + offset\n", "            assert offset is not None\n"
        "            x = x + offset\n")
    assert _findings(result) == [("TSF207", 10, "fixed"), ("TSF228", 12, "fixed")]


LOCAL = HEADER + textwrap.dedent("""\
    class Refiner(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x, steps: int):
            prev = None
            for step in range(steps):
                x = torch.tanh(self.proj(x))
                if prev is not None:
                    x = x + prev
                prev = x
            return x
    """)


def test_a_local_set_to_none_then_to_a_tensor_in_a_loop_is_declared_optional() -> None:
    result = _rewrite(LOCAL)
    assert result.text == "from typing import Optional\n\n" + LOCAL.replace(
        "prev = None", "prev: Optional[torch.Tensor] = None")
    assert _findings(result) == [("TSF229", 11, "fixed")]


MERGED = HEADER + textwrap.dedent("""\
    class TwoBranch(nn.Module):
        def __init__(self):
            super().__init__()
            self.freq = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
            self.time = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

        def forward(self, x, xt: torch.Tensor, merge_at: int):
            for idx, (freq, time) in enumerate(zip(self.freq, self.time)):
                inject = None
                xt = time(xt)
                if idx == merge_at:
                    inject = xt
                x = freq(x)
                if inject is not None:
                    x = x + inject
            return x
    """)


def test_a_local_set_to_a_local_of_one_known_type_is_declared_optional() -> None:
    # ``xt = time(xt)`` tells nothing (a list element's call), but ``xt`` is a Tensor
    # parameter and TorchScript keeps one type per local: ``inject`` is Optional[Tensor]
    # (hybrid demucs' encoder loop).
    result = _rewrite(MERGED)
    assert result.text == "from typing import Optional\n\n" + MERGED.replace(
        "inject = None", "inject: Optional[torch.Tensor] = None")
    assert _findings(result) == [("TSF229", 13, "fixed")]


def test_a_local_whose_known_bindings_disagree_is_left() -> None:
    code = MERGED.replace("xt = time(xt)", "xt = time(xt)\n            xt = 1")
    assert "inject: Optional" not in _rewrite(code).text


@pytest.mark.slow
def test_the_declared_local_scripts_with_eager_results(tmp_path: Path) -> None:
    import torch

    module, scripted = _scripted_module(_rewrite(LOCAL).text, "Refiner", tmp_path)
    x = torch.randn(2, 4)
    torch.testing.assert_close(scripted(x, 3), module(x, 3), rtol=1e-4, atol=1e-5)  # type: ignore[operator]


def test_a_straight_line_rebinding_of_a_none_local_is_left() -> None:
    code = HEADER + textwrap.dedent("""\
        class Plain(nn.Module):
            def forward(self, x):
                y = None
                y = x * 2
                return y.sum()
        """)
    assert _rewrite(code).text == code


# ---- module-level functions compiled code calls (issue 18 item 7) ----------------------------

HELPERS = HEADER + textwrap.dedent("""\
    def length_to_mask(length, max_len=None):
        if max_len is None:
            max_len = int(length.max())
        return torch.arange(max_len).unsqueeze(0) < length.unsqueeze(1)


    def masked_sum(x, lengths, dim=1):
        mask = length_to_mask(lengths, max_len=x.size(dim))
        return (x * mask.unsqueeze(-1)).sum(dim)


    def describe(x, digits=3):
        return round(float(x.sum()), digits)


    class Pool(nn.Module):
        def forward(self, x, lengths=None):
            if lengths is None:
                return x.sum(1)
            if not torch.jit.is_scripting():
                print(describe(x))
            return masked_sum(x, lengths)
    """)


def test_the_functions_forward_calls_are_annotated_callees_first() -> None:
    result = _rewrite(HELPERS)
    assert result.text == "from typing import Optional\n\n" + HELPERS.replace(
        "def length_to_mask(length, max_len=None):",
        "def length_to_mask(length, max_len: Optional[int] = None):").replace(
        "def masked_sum(x, lengths, dim=1):", "def masked_sum(x, lengths, dim: int = 1):").replace(
        "def forward(self, x, lengths=None):",
        # masked_sum passes lengths on to length_to_mask's Tensor parameter
        "def forward(self, x, lengths: Optional[torch.Tensor] = None):")
    # describe() runs only in eager mode: never compiled, left as it is.
    assert "def describe(x, digits=3):" in result.text
    # One change, the class's: its validation covers the functions it compiles.
    [change] = result.changes
    assert change.class_name == "Pool"
    assert "masked_sum() (a function of this file it calls): typed 1 parameter(s)" in \
        change.summary
    assert "length_to_mask() (a function of this file it calls)" in change.summary
    # The sites are reported on the functions' own lines, under the class that compiles them.
    assert _findings(result) == [("TSF206", 11, "fixed"), ("TSF207", 5, "fixed"),
                                 ("TSF207", 21, "fixed")]
    assert {f.class_name for f in result.fixes} == {"Pool"}


def test_a_function_a_rejected_class_reaches_is_left_as_it_is() -> None:
    code = HEADER + textwrap.dedent("""\
        def scale(x, factor=2.0):
            return x * factor


        def shift(x, offset=1):
            return x + offset


        class Scaled(nn.Module):
            def forward(self, x):
                return scale(x)


        class Both(nn.Module):
            def forward(self, x):
                return shift(scale(x))
        """)
    both = _rewrite(code)
    assert "def scale(x, factor: float = 2.0):" in both.text
    assert "def shift(x, offset: int = 1):" in both.text
    assert [c.class_name for c in both.changes] == ["Scaled", "Both"]
    # Validation rejected Both: what it reaches stays, though Scaled reaches scale() too.
    result = rewrite_source(
        code,
        RewriteSettings([Annotate]),
        FileContext("model.py", skip_classes={"annotate": frozenset({"Both"})}),
    )
    assert result.text == code
    assert result.changes == [] and result.fixes == []


def test_a_function_whose_callee_a_rejected_class_reaches_is_left_too() -> None:
    code = HEADER + textwrap.dedent("""\
        def inner(x, k=2):
            return x.topk(k).values


        def outer(x, gain=1.0):
            return inner(x) * gain


        class UsesOuter(nn.Module):
            def forward(self, x):
                return outer(x)


        class UsesInner(nn.Module):
            def forward(self, x):
                return inner(x)
        """)
    result = rewrite_source(
        code,
        RewriteSettings([Annotate]),
        FileContext("model.py", skip_classes={"annotate": frozenset({"UsesInner"})}),
    )
    # outer()'s annotations would be written without inner()'s, which UsesInner's rejection
    # keeps: neither is written.
    assert result.text == code


def test_a_class_whose_only_change_is_in_a_function_records_it() -> None:
    code = HEADER + textwrap.dedent("""\
        def clip(x, limit=1.0):
            return x.clamp(-limit, limit)


        class Clipped(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return clip(x)
        """)
    result = _rewrite(code)
    assert result.text == code.replace("def clip(x, limit=1.0):",
                                       "def clip(x, limit: float = 1.0):")
    assert [(c.class_name, c.summary) for c in result.changes] == [
        ("Clipped", "clip() (a function of this file it calls): typed 1 parameter(s)")]


def test_names_that_are_not_the_modules_function_are_not_followed() -> None:
    code = HEADER + textwrap.dedent("""\
        def act(x, slope=0.1):
            return x * slope


        @torch.jit.ignore
        def dump(x, path='out.txt'):
            return x


        class Local(nn.Module):
            def forward(self, x, act=None):
                if act is None:
                    return dump(x)
                return x
        """)
    # ``act`` is forward's parameter there, and dump() is never compiled.
    assert _rewrite(code).text == code


def test_observed_types_of_a_function_type_its_parameters() -> None:
    from tsfix.codemods.rules.annotate._functions import FUNCTIONS_KEY

    code = HEADER + textwrap.dedent("""\
        def pick(x, index):
            return x[index]


        class Picker(nn.Module):
            def forward(self, x):
                return pick(x, x.size(0) - 1)
        """)
    assert _rewrite(code).text == code      # nothing in the code tells what index is
    observed = {FUNCTIONS_KEY: {"pick": {"index": "int"}}}
    assert "def pick(x, index: int):" in _rewrite(code, observed=observed).text


def test_a_function_under_another_decorator_is_refused_with_the_reason() -> None:
    code = HEADER + textwrap.dedent("""\
        import functools


        def traced(fn):
            @functools.wraps(fn)
            def wrapper(*args):
                return fn(*args)
            return wrapper


        @traced
        def scale(x, factor=2.0):
            return x * factor


        class Scaled(nn.Module):
            def forward(self, x):
                return scale(x)
        """)
    result = _rewrite(code)
    assert result.text == code
    assert [(s.class_name, s.line, s.reason) for s in result.skips] == [
        ("Scaled", 16, "scale(): decorated with @traced: TorchScript compiles what the "
         "decorator returns, not this function; left as it is")]


def test_a_function_of_another_file_is_reported_with_what_blocks_it(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "utils.py").write_text(textwrap.dedent("""\
        import torch


        def length_to_mask(length, max_len=None, *, fill: float = 1.0):
            return torch.arange(int(length.max())) < length.unsqueeze(1)


        def typed(x: torch.Tensor, k: int = 2) -> torch.Tensor:
            return x * k
        """))
    code = HEADER + textwrap.dedent("""\
        from pkg.utils import length_to_mask, typed
        from .utils import length_to_mask as mask_of


        def pooled(x, lengths):
            return x * mask_of(lengths).unsqueeze(-1)


        class Pool(nn.Module):
            def forward(self, x, lengths):
                mask = length_to_mask(lengths)
                return typed(pooled(x, lengths)) * mask.unsqueeze(-1)
        """)
    path = package / "model.py"
    path.write_text(code)
    result = rewrite_source(code, RewriteSettings([Annotate]), str(path))
    assert result.text == code
    elsewhere = [(s.class_name, s.line, s.reason) for s in result.skips]
    blockers = ("its `max_len=None`, keyword-only `fill` would be typed Tensor or rejected; "
                "annotate rewrites a function of another file only in the fix loop of a "
                "configured model that stops in it (validated with the model, not with this "
                "class): configure a model that uses this class, or annotate them there by "
                "hand")
    # Once per function and class, at the first call (in forward, or in a function of this
    # file forward reaches); typed() has nothing TorchScript rejects.
    assert elsewhere == [
        ("Pool", 15, "length_to_mask() comes from pkg/utils.py (line 4), another file of the "
         f"tree, and TorchScript compiles it with this class: {blockers}"),
        ("Pool", 10, "mask_of() comes from pkg/utils.py (line 4), another file of the tree, "
         f"and TorchScript compiles it with this class: {blockers}"),
    ]


@pytest.mark.slow
def test_a_functions_parameter_is_typed_from_the_configured_models_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the source tells ``alpha``'s type (no default, arithmetic fits a Tensor too):
    the observe round records the module-level function's calls and annotate reads them."""
    from tsfix.codemods.pipeline.engine import Options, run

    (tmp_path / "m.py").write_text(textwrap.dedent("""\
        import torch.nn as nn


        def mix(x, y, alpha):
            return alpha * x + (1 - alpha) * y


        class Mixer(nn.Module):
            def __init__(self, dim, alpha):
                super().__init__()
                self.fc = nn.Linear(dim, dim)
                self.alpha = alpha

            def forward(self, x):
                return mix(self.fc(x), x, self.alpha)
        """))
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.tsfix.examples."m.py:Mixer"]
        init = [{ dim = 4, alpha = 0.25 }]
        inputs = ["randn(2, 4)"]
        """))
    monkeypatch.chdir(tmp_path)
    result = run([tmp_path / "m.py"], Options(rules=["annotate"], jobs=1))
    assert "def mix(x, y, alpha: float):" in (tmp_path / "m.py").read_text()
    assert [c.verdict for c in result.classes()] == ["verified"]
    assert [m.ok for m in result.models()] == [True]


def test_an_observed_return_does_not_type_returns_a_setting_chooses_between() -> None:
    """asteroid's Conv1DBlock returns a Tensor or a tuple by its skip setting (constant-flag
    makes the test a constant): the one configuration the examples ran returned a tuple, and
    `-> Tuple[Tensor, Tensor]` broke scripting every configuration without the skip."""
    code = textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class Block(nn.Module):
            __constants__ = ["has_skip"]

            def __init__(self, skip: int = 0):
                super().__init__()
                self.has_skip = bool(skip)
                self.res = nn.Linear(4, 4)
                self.skip = nn.Linear(4, 4)

            def forward(self, x):
                out = self.res(x)
                if not self.has_skip:
                    return out
                return out, self.skip(x)
        """)
    observed = {"Block": {"forward": {"return": "Tuple[Tensor, Tensor]"}}}
    result = _rewrite(code, observed=observed)
    assert "->" not in result.text
    assert any("returns disagree" in s.reason for s in result.skips)


def test_a_return_the_code_cannot_type_keeps_the_observed_type_off_when_it_cannot_be_it(
        ) -> None:
    """egnn-pytorch's EGNN_Network: `return feats, coors, coor_changes` under a flag no
    example set, `return feats, coors` otherwise; the examples returned the pair, and
    `-> Tuple[Tensor, Tensor]` made the class fail to script. A return of the same arity
    the code cannot type still takes the observed type."""
    code = textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 4)

            def forward(self, x, flag: bool = False):
                y = self.proj(x)
                if flag:
                    return x, y, trace(y)
                return x, y
        """)
    observed = {"Net": {"forward": {"return": "Tuple[Tensor, Tensor]"}}}
    assert "->" not in _rewrite(code, observed=observed).text

    same_arity = code.replace("return x, y, trace(y)", "return x, trace(y)")
    typed = _rewrite(same_arity, observed=observed)
    assert "-> Tuple[torch.Tensor, torch.Tensor]:" in typed.text, typed.text


MASK_HELPERS = "import torch\n\n\n" + textwrap.dedent("""\
    def steps(n: int, device=None):
        return torch.arange(n, device=device)


    def make_mask(lengths, max_len=None, dtype=None):
        if max_len is None:
            max_len = int(lengths.max())
        if dtype is None:
            dtype = lengths.dtype
        mask = steps(max_len, device=lengths.device)[None, :] < lengths[:, None]
        return mask.to(dtype=dtype)


    def unused(x, scale=None):
        return x
    """)


def test_a_function_compiled_from_another_file_is_annotated_as_its_own_change() -> None:
    """The fix loop names a function another file's compiled code calls: annotate types it and
    what it calls, as one change under ``make_mask()``; the other functions stay."""
    result = rewrite_source(
        MASK_HELPERS,
        RewriteSettings([Annotate]),
        FileContext("masks.py", compiled_functions={"make_mask"}),
    )
    [change] = result.changes
    assert change.class_name == "make_mask()"
    assert change.lines == (8, 14)
    assert "steps() (a function of this file make_mask() calls)" in change.summary
    assert ("    lengths, max_len: Optional[int] = None, dtype: Optional[torch.dtype] = None\n"
            in result.text), result.text
    # Passed to a torch function's ``device=``, which takes None: no assert needed.
    assert "def steps(n: int, device: Optional[torch.device] = None):\n    return" in result.text
    assert "def unused(x, scale=None):" in result.text
    assert "from typing import Optional\n" in result.text
    assert {f.class_name for f in result.fixes} == {"make_mask()"}
    # Nothing changes without the name, and a second run changes nothing.
    assert (
        rewrite_source(MASK_HELPERS, RewriteSettings([Annotate]), "masks.py").text == MASK_HELPERS
    )
    again = rewrite_source(
        result.text,
        RewriteSettings([Annotate]),
        FileContext("masks.py", compiled_functions={"make_mask"}),
    )
    assert again.text == result.text and not again.changes


def test_a_compiled_function_is_left_only_when_its_own_rewrite_was_rejected() -> None:
    code = MASK_HELPERS + "\n\n" + textwrap.dedent("""\
        class Masked(torch.nn.Module):
            def forward(self, x, lengths):
                return x * make_mask(lengths)
        """)
    accepted = rewrite_source(
        code, RewriteSettings([Annotate]), FileContext("masks.py", compiled_functions={"make_mask"})
    )
    assert {c.class_name for c in accepted.changes} == {"Masked", "make_mask()"}
    # The repair loop leaves the file's other classes to other rounds (skipped for this rule),
    # which is no rejection of theirs: the function it names is rewritten and proven with the
    # model (speechbrain's pad_packed_sequence, reached by RNN, LSTM and GRU).
    others = rewrite_source(
        code,
        RewriteSettings([Annotate]),
        FileContext(
            "masks.py",
            compiled_functions={"make_mask"},
            skip_classes={"annotate": frozenset({"Masked"})},
        ),
    )
    assert {c.class_name for c in others.changes} == {"make_mask()"}
    # Its own rewrite rejected, the function is left as it was.
    rejected = rewrite_source(
        code,
        RewriteSettings([Annotate]),
        FileContext(
            "masks.py",
            compiled_functions={"make_mask"},
            skip_classes={"annotate": frozenset({"make_mask()"})},
        ),
    )
    assert rejected.text == code and not rejected.changes


def test_device_and_dtype_values_are_typed_so() -> None:
    code = HEADER + textwrap.dedent("""\
        class Cast(nn.Module):
            def forward(self, x, dtype=None, device=None):
                if device is None:
                    device = x.device
                return x + torch.ones(x.shape, dtype=dtype, device=device)
        """)
    result = _rewrite(code)
    assert ("        dtype: Optional[torch.dtype] = None,\n"
            "        device: Optional[torch.device] = None,\n") in result.text, result.text
    observed = _rewrite(HEADER + textwrap.dedent("""\
        class Cast(nn.Module):
            def forward(self, x, where):
                return x.to(where)
        """), observed={"Cast": {"forward": {"where": "torch.device"}}})
    assert "def forward(self, x, where: torch.device):" in observed.text, observed.text


# ---- a None default passed down a chain of module classes (issue 27 item 2: ECAPA_TDNN) ------

CHAIN = HEADER + textwrap.dedent("""\
    from pkg.masks import length_to_mask


    class Gate(nn.Module):
        def forward(self, x, lengths=None):
            if lengths is not None:
                L = x.shape[-1]
                x = x * length_to_mask(lengths * L, max_len=L).unsqueeze(1)
            return x


    class GatedBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = Gate()

        def forward(self, x, lengths=None):
            return self.gate(x, lengths)


    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Identity(), GatedBlock()])

        def forward(self, x, lengths=None):
            for layer in self.blocks:
                if isinstance(layer, GatedBlock):
                    x = layer(x, lengths=lengths)
                else:
                    x = layer(x)
            return x
    """)


def _chain_package(tmp_path: Path) -> Path:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "masks.py").write_text(textwrap.dedent("""\
        import torch


        def length_to_mask(length, max_len: int):
            return torch.arange(max_len).unsqueeze(0) < length.unsqueeze(1)
        """))
    path = package / "model.py"
    path.write_text(CHAIN)
    return path


def test_a_none_default_takes_its_type_down_a_chain_of_module_classes(tmp_path: Path) -> None:
    # Gate passes `lengths * L` to another file's function whose unannotated parameter is a
    # Tensor to TorchScript; GatedBlock passes lengths to its Gate submodule's forward;
    # Encoder to the GatedBlock an isinstance test narrows its loop variable to.
    result = rewrite_source(CHAIN, RewriteSettings([Annotate]), str(_chain_package(tmp_path)))
    assert result.text == "from typing import Optional\n\n" + CHAIN.replace(
        "lengths=None", "lengths: Optional[torch.Tensor] = None")
    assert _findings(result) == [("TSF207", 9, "fixed"), ("TSF207", 21, "fixed"),
                                 ("TSF207", 30, "fixed")]


@pytest.mark.slow
def test_the_typed_chain_scripts_and_runs_with_and_without_lengths(tmp_path: Path) -> None:
    import sys

    import torch

    path = _chain_package(tmp_path)
    path.write_text(rewrite_source(CHAIN, RewriteSettings([Annotate]), str(path)).text)
    sys.path.insert(0, str(tmp_path))
    try:
        from pkg.model import Encoder  # type: ignore[import-not-found]

        module = Encoder().eval()
        scripted = torch.jit.script(module)
        x, lengths = torch.randn(2, 3, 5), torch.tensor([1.0, 0.6])
        torch.testing.assert_close(scripted(x), module(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(scripted(x, lengths), module(x, lengths), rtol=1e-4, atol=1e-5)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "pkg" or n.startswith("pkg.")]:
            del sys.modules[name]


def test_a_none_default_given_to_a_loss_or_taking_a_tensors_place_is_an_optional_tensor(
        ) -> None:
    """gated-state-spaces' `F.cross_entropy(logits, labels)` and hourglass-transformer's
    `default(context, x)` (none-helpers writes it `context if context is not None else x`):
    unannotated, TorchScript took them for Tensors, a call without them failed in the
    scripted model ("Expected a proper Tensor but got None"), and validation rejected the
    rules' correct rewrites for it."""
    code = textwrap.dedent("""\
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 5)

            def forward(self, x, labels=None, context=None):
                kv = context if context is not None else x
                logits = self.proj(kv)
                if labels is None:
                    return logits
                return F.cross_entropy(logits.transpose(1, 2), target=labels)
        """)
    result = _rewrite(code)
    assert ("    def forward(\n        self,\n        x,\n"
            "        labels: Optional[torch.Tensor] = None,\n"
            "        context: Optional[torch.Tensor] = None,\n    ):\n") in result.text, \
        result.text
    # The evidence is the use: a name only compared with None says nothing.
    unused = code.replace("kv = context if context is not None else x",
                          "kv = x if context is None else x")
    assert "context=None" in _rewrite(unused).text
