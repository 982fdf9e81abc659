"""The parameter types the repair loop reads from TorchScript's messages (fix_loop.py:
``typed_by_message``, ``typed_rebinding``) and how annotate writes them: module-level functions
as well as methods, both ways round (a value of another type passed to an unannotated
parameter, and an unannotated parameter passed on where another type is expected), classes of
torch such as PackedSequence, the ``import torch`` an annotation spelled through it needs. The
messages are torch 2.13's, measured with the reproductions quoted."""

from __future__ import annotations

import textwrap

from conftest import rule_rewriter
from tsfix.codemods.pipeline.phases.fix_loop import (
    annotation_kind,
    typed_by_message,
    typed_rebinding,
)
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules.annotate import Annotate
from tsfix.codemods.validation.protocol import OBSERVED_FUNCTIONS, Blocker

PACKED = "torch.nn.utils.rnn.PackedSequence"

# speechbrain's RNN.py, reduced: the wrappers of torch's packing functions.
RNN = textwrap.dedent("""\
    import torch
    from torch import nn


    def pad_packed_sequence(inputs):
        outputs, lengths = torch.nn.utils.rnn.pad_packed_sequence(inputs, batch_first=True)
        return outputs


    def passthrough(inputs):
        return inputs.data


    class LSTM(nn.Module):
        def unpack(self, inputs):
            return torch.nn.utils.rnn.pad_packed_sequence(inputs, batch_first=True)[0]
""")

# `output = pad_packed_sequence(output)` with `output` a PackedSequence: TorchScript compiles
# the function first, and its unannotated `inputs` (a Tensor) is passed to torch's function,
# which takes a PackedSequence. The frame is the call inside the function.
PASSED_ON = textwrap.dedent("""\


    pad_packed_sequence(__torch__.torch.nn.utils.rnn.PackedSequence sequence, bool batch_first=False, float padding_value=0., int? total_length=None) -> ((Tensor, Tensor)):
    Expected a value of type '__torch__.torch.nn.utils.rnn.PackedSequence' for argument 'sequence' but instead found type 'Tensor (inferred)'.
    Inferred the value for argument 'sequence' to be of type 'Tensor' because it was not annotated with an explicit type.
    :
      File "/p/rnn.py", line 6
    def pad_packed_sequence(inputs):
        outputs, lengths = torch.nn.utils.rnn.pad_packed_sequence(inputs, batch_first=True)
                           ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~ <--- HERE
        return outputs
    'pad_packed_sequence' is being compiled since it was called from 'LSTM.forward'
      File "/p/rnn.py", line 30
                output = pad_packed_sequence(output)
                         ~~~~~~~~~~~~~~~~~~~~~~~~~~~ <--- HERE
""")  # noqa: E501

# `output = passthrough(output)`: the function's body compiles with `inputs` a Tensor, so the
# call fails, at the caller's line, naming the function's signature (no `self`).
PASSED_TO_FUNCTION = textwrap.dedent("""\


    passthrough(Tensor inputs) -> Tensor:
    Expected a value of type 'Tensor (inferred)' for argument 'inputs' but instead found type '__torch__.torch.nn.utils.rnn.PackedSequence'.
    Inferred 'inputs' to be of type 'Tensor' because it was not annotated with an explicit type.
    :
      File "/p/rnn.py", line 30
                output = passthrough(output)
                         ~~~~~~~~~~~ <--- HERE
""")  # noqa: E501


def blocker(line: int, scope: str, message: str) -> Blocker:
    return Blocker("/p/rnn.py", line, scope, message)


def fields(typed: object) -> tuple[object, ...]:
    return tuple(getattr(typed, name) for name in ("path", "class_name", "method", "param",
                                                   "kind"))


def test_a_function_parameter_passed_on_where_a_packed_sequence_is_expected() -> None:
    typed = typed_by_message(PASSED_ON, {}, blocker(6, "pad_packed_sequence", PASSED_ON), RNN)
    assert typed is not None and typed.function == "pad_packed_sequence"
    assert fields(typed) == ("/p/rnn.py", OBSERVED_FUNCTIONS, "pad_packed_sequence", "inputs",
                             PACKED)
    # Without the blocker's file, or on a line without such a call, nothing is typed.
    assert typed_by_message(PASSED_ON, {}) is None
    assert typed_by_message(PASSED_ON, {}, blocker(7, "pad_packed_sequence", PASSED_ON),
                            RNN) is None
    # The parameter annotated already: not the compiler's guess.
    annotated = RNN.replace("def pad_packed_sequence(inputs):",
                            "def pad_packed_sequence(inputs: torch.Tensor):")
    assert typed_by_message(PASSED_ON, {}, blocker(6, "pad_packed_sequence", PASSED_ON),
                            annotated) is None


def test_a_method_parameter_passed_on_where_a_packed_sequence_is_expected() -> None:
    message = PASSED_ON.replace('line 6\n', 'line 16\n')
    typed = typed_by_message(message, {"/p/rnn.py": ("LSTM",)},
                             blocker(16, "LSTM.unpack", message), RNN)
    assert typed is not None and typed.function is None
    assert fields(typed) == ("/p/rnn.py", "LSTM", "unpack", "inputs", PACKED)


def test_a_packed_sequence_passed_to_a_functions_unannotated_parameter() -> None:
    typed = typed_by_message(PASSED_TO_FUNCTION, {"/p/rnn.py": ("LSTM",)},
                             blocker(30, "LSTM.forward", PASSED_TO_FUNCTION), RNN)
    assert typed is not None
    assert fields(typed) == ("/p/rnn.py", OBSERVED_FUNCTIONS, "passthrough", "inputs", PACKED)
    # A function the blocker's file does not define (imported from elsewhere): its file is
    # not known for certain.
    assert typed_by_message(PASSED_TO_FUNCTION, {}, blocker(30, "LSTM.forward", ""),
                            RNN.replace("def passthrough(", "def other(")) is None


def test_only_types_an_annotation_can_name_are_given() -> None:
    assert annotation_kind("__torch__.torch.nn.utils.rnn.PackedSequence") == PACKED
    assert annotation_kind("Optional[Tensor]") == "Optional[Tensor]"
    assert annotation_kind("Tuple[Tensor, Tensor]") == "Tuple[Tensor, Tensor]"
    # A class of the tree would need an import of its module.
    assert annotation_kind("__torch__.pkg.blocks.Inner") is None
    tree_class = PASSED_TO_FUNCTION.replace("__torch__.torch.nn.utils.rnn.PackedSequence",
                                            "__torch__.pkg.blocks.State")
    assert typed_by_message(tree_class, {}, blocker(30, "LSTM.forward", tree_class),
                            RNN) is None


def test_a_rebinding_the_compiler_names_is_given_to_rebound_local() -> None:
    message = ("Variable 'x' previously had type Tensor (inferred) but is now being assigned "
               "to a value of type __torch__.torch.nn.utils.rnn.PackedSequence\n:\n"
               '  File "/p/rnn.py", line 24\n')
    typed = typed_rebinding(blocker(24, "LSTM.forward", message), "LSTM")
    assert typed is not None
    assert fields(typed) == ("/p/rnn.py", "LSTM", "forward", "rebound x",
                             "__torch__.torch.nn.utils.rnn.PackedSequence")
    assert typed_rebinding(blocker(24, "LSTM.forward", "try blocks aren't supported"),
                           "LSTM") is None
    assert typed_rebinding(blocker(24, "pack", message), "LSTM") is None


# ---- how annotate writes them ----------------------------------------------------------------

annotate = rule_rewriter(Annotate)

UNPACK = """\
def unpack(inputs):
    out, _ = nn.utils.rnn.pad_packed_sequence(inputs, batch_first=True)
    return out


class M(nn.Module):
    def forward(self, x):
        return unpack(x)
"""


def test_a_packed_sequence_is_annotated_through_the_files_name_for_torch() -> None:
    observed = {OBSERVED_FUNCTIONS: {"unpack": {"inputs": PACKED}}}
    header = "import torch\nfrom torch import nn\n\n\n"
    assert annotate(UNPACK, header=header, observed=observed).text == header + UNPACK.replace(
        "def unpack(inputs):", "def unpack(inputs: torch.nn.utils.rnn.PackedSequence):")
    header = "import torch as th\nfrom torch import nn\n\n\n"
    assert annotate(UNPACK, header=header, observed=observed).text == header + UNPACK.replace(
        "def unpack(inputs):", "def unpack(inputs: th.nn.utils.rnn.PackedSequence):")


def test_an_annotation_through_torch_imports_it_when_the_file_does_not() -> None:
    """`from torch import nn` only: annotate wrote `torch.Tensor` without `import torch`, and
    the file failed on import."""
    code = ("from torch import nn\n\n\nclass M(nn.Module):\n"
            "    def forward(self, x, mask=None):\n"
            "        if mask is not None:\n"
            "            x = x.masked_fill(mask, 0.0)\n"
            "        return x\n")
    assert annotate(code).text == (
        "from typing import Optional\n\nimport torch\nfrom torch import nn\n\n\n"
        "class M(nn.Module):\n"
        "    def forward(self, x, mask: Optional[torch.Tensor] = None):\n"
        "        if mask is not None:\n"
        "            x = x.masked_fill(mask, 0.0)\n"
        "        return x\n")
    observed = {OBSERVED_FUNCTIONS: {"unpack": {"inputs": PACKED}}}
    header = "from torch import nn\n\n\n"
    assert annotate(UNPACK, header=header, observed=observed).text == (
        "import torch\n" + header + UNPACK.replace(
            "def unpack(inputs):", "def unpack(inputs: torch.nn.utils.rnn.PackedSequence):"))


def test_a_call_with_several_overloads_gives_no_type() -> None:
    """Each overload names the type it would take: none of them is the one."""
    message = ("Arguments for call are not valid.\nThe following variants are available:\n  \n"
               + PASSED_ON.replace("\n\n", "", 1))
    assert typed_by_message(message, {}, blocker(6, "pad_packed_sequence", message),
                            RNN) is None


def test_the_loops_function_is_annotated_though_the_classes_reaching_it_are_left() -> None:
    """The fix loop rewrites a function the model stops in (``compiled_functions``) and leaves
    annotate the classes of the file it did not choose (``skip_classes``): the function is
    still annotated (speechbrain's pad_packed_sequence, reached by RNN, LSTM and GRU)."""
    from tsfix.codemods.pipeline.rewrite import rewrite_source

    text = "import torch\nfrom torch import nn\n\n\n" + UNPACK
    observed = {OBSERVED_FUNCTIONS: {"unpack": {"inputs": PACKED}}}
    done = rewrite_source(
        text,
        RewriteSettings([Annotate]),
        FileContext(
            "m.py",
            skip_classes={"annotate": frozenset({"M"})},
            observed=observed,
            compiled_functions={"unpack"},
        ),
    )
    assert "def unpack(inputs: torch.nn.utils.rnn.PackedSequence):" in done.text
    assert [c.class_name for c in done.changes] == ["unpack()"]
