"""The verifier (codemods/validation/verifier.py): one comparison step for every step's
outputs, and functions of one size in validation/.

The comparison step is called in this process (torch, no workers); the verdict texts it
writes are checked against the words each step gives it. The shape test reads the sources.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn
from tsfix.codemods.validation.case import literal
from tsfix.codemods.validation.protocol import REJECTED
from tsfix.codemods.validation.verifier import Check, at_other_batch, reproduces
from tsfix.codemods.validation.worker import Instance, Verdict, difference, other_batch

VALIDATION = Path(__file__).resolve().parent.parent / "codemods" / "validation"
MAX_LINES = 100
MAX_PARAMETERS = 6


class Doubles(nn.Module):
    def forward(self, x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
        return x * scale


class FirstRow(nn.Module):
    """Right at batch size 2 only: the second batch size tells it apart."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:2] * 2


def _words(step: str, model_label: str = "m.py:Net") -> Check:
    return Check(f"{step}: {{label}} raised (model {literal(model_label)}): {{error}}",
                 f"{step}: {{found}} for {{label}}{{with_values}}", {})


def test_reproduces_accepts_equal_outputs_and_rejects_a_difference_naming_the_call() -> None:
    x = torch.ones(2, 3)
    reproduces(Doubles(), [("init[0]", (x,), {}, x * 2)], _words("eager parity"))
    with pytest.raises(Verdict) as raised:
        reproduces(Doubles(), [("init[0]", (x,), {}, x * 2), ("init[1]", (x,), {}, x * 3)],
                   _words("re-script"))
    assert raised.value.verdict == REJECTED
    assert raised.value.reason == "re-script: output: max abs diff 1 for init[1]"


def test_outputs_match_bit_for_bit_or_within_tolerance_and_nan_matches_nan() -> None:
    # Equal tensors are answered by torch.equal before allclose (which costs a second per
    # 50M floats); what allclose decides must not change.
    x = torch.tensor([1.0, float("nan"), 3.0])
    assert difference(x, x.clone()) is None                   # NaN where NaN was
    assert difference(x, x + 1e-7) is None                    # within rtol 1e-4
    assert difference(x[::2], x[::2] + 1.0) == "output: max abs diff 1"
    assert difference(x, torch.tensor([1.0, 2.0, 3.0])) == "output: max abs diff inf"
    assert difference(torch.arange(3), torch.arange(3)) is None
    assert difference(torch.arange(3), torch.arange(3) + 1) == "output: values differ"
    assert difference(x, x.double()) == ("output: expected (3,) torch.float32, "
                                         "got (3,) torch.float64")


def test_reproduces_gives_the_lifted_settings_and_names_them() -> None:
    x = torch.ones(2, 3)
    with pytest.raises(Verdict) as raised:
        reproduces(Doubles(), [("init[0]", (x,), {}, x * 2)], _words("one artifact"),
                   {"scale": torch.tensor(4.0)})
    assert raised.value.reason == ("one artifact: output: max abs diff 2 for init[0] "
                                   "with {'scale': 4.0}")


def test_a_raising_module_is_rejected_with_its_error_and_braces_in_a_label_stay() -> None:
    x = torch.ones(2, 3)
    with pytest.raises(Verdict) as raised:
        reproduces(Doubles(), [("init[0]", (x, "no"), {}, x)],
                   _words("eager parity", "a{b}/m.py:Net"))
    assert raised.value.reason.startswith(
        "eager parity: init[0] raised (model a{b}/m.py:Net): TypeError:")


def test_the_second_batch_size_prefixes_the_step_words_with_the_size() -> None:
    x = torch.ones(2, 3)
    batch = other_batch((x,), {})
    assert batch is not None and batch.run_original(Doubles())
    at_other_batch(Doubles(), batch, _words("re-script"), "init[0]")
    with pytest.raises(Verdict) as raised:
        at_other_batch(FirstRow(), batch, _words("re-script"), "init[0]")
    assert raised.value.reason == ("at batch size 3: re-script: output: expected (3, 3) "
                                   "torch.float32, got (2, 3) torch.float32 for init[0]")


def test_a_configured_model_whose_program_differs_fails_against_the_original_outputs() -> None:
    """The export target's model verdict (export.check_model) compares each exported
    program with the ORIGINAL model's eager outputs, on the same comparison step."""
    from tsfix.codemods.validation.export import check_model

    x = torch.ones(2, 3)
    configs = [Instance(0, {}, [((x,), {})], False)]
    held = check_model(configs, [Doubles()], [[x * 2]], {})
    assert held.ok and held.reason.startswith("1 configuration(s): eager parity, exported (1 ")
    differs = check_model(configs, [Doubles()], [[x * 3]], {})
    assert not differs.ok
    assert differs.reason == ("export: output: max abs diff 1 for init[0] (against the "
                              "original's eager output)")


def _too_big(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        arguments = node.args
        names = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        count = len(names) + bool(arguments.vararg) + bool(arguments.kwarg)
        if names and names[0].arg in ("self", "cls"):
            count -= 1
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if lines > MAX_LINES or count > MAX_PARAMETERS:
            found.append(f"{path.name}:{node.lineno} {node.name}: {lines} lines, "
                         f"{count} parameters")
    return found


def test_every_validation_function_is_small() -> None:
    """Issue 26's bar for validation/: no function over 100 lines or 6 parameters (a frozen
    dataclass argument carries what belongs together)."""
    found = [item for path in sorted(VALIDATION.glob("*.py")) for item in _too_big(path)]
    assert found == []


def test_every_pipeline_function_is_small() -> None:
    """The same bar for pipeline/ (phases included): the phases take the RunState, the
    engine its RunSettings and one record per file, rewrite_source its RewriteSettings and
    the file's FileContext."""
    pipeline = VALIDATION.parent / "pipeline"
    found = [item for path in sorted(pipeline.rglob("*.py")) for item in _too_big(path)]
    assert found == []


def test_the_scope_of_a_line_is_the_innermost_definition_holding_it() -> None:
    from tsfix.codemods.validation.model import scope_at

    text = ("import torch\n"                    # 1
            "class Net:\n"                      # 2
            "    @property\n"                   # 3
            "    def scale(self):\n"            # 4
            "        return 1\n"                # 5
            "    @scale.setter\n"               # 6
            "    def scale(self, v):\n"         # 7
            "        def inner():\n"            # 8
            "            return v\n"            # 9
            "        self.v = inner()\n"        # 10
            "def helper():\n"                   # 11
            "    return 2\n")                   # 12
    assert [scope_at(text, line) for line in range(1, 13)] == [
        None, "Net", "Net.scale", "Net.scale", "Net.scale", "Net.scale", "Net.scale",
        "Net.scale.inner", "Net.scale.inner", "Net.scale", "helper", "helper"]
    assert scope_at("def broken(:\n", 1) is None
