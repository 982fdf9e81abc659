"""rebound-local: a local re-bound to another type under `if c:` and consumed under a later
`if c:` gets its own name, the two tests merged into one if/else; each refusal with its reason;
the repair loop's evidence (``"rebound x"`` among the observed types); what ``tsfix check``
shows (TSF119). The rewritten code was measured to script on torch 2.13 (the fixtures' slow
test validates them; the last test here scripts one)."""

from __future__ import annotations

import importlib.util
import io
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from conftest import load_module, rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.rules.rebound_local import ReboundLocal

HEADER = ("from typing import Optional, Tuple\n\nimport torch\nimport torch.nn as nn\n"
          "from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence\n\n\n")

rewrite = rule_rewriter(ReboundLocal, header=HEADER)

LSTM = """\
class LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 5, batch_first=True)

    def forward(self, x, hx: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                lengths: Optional[torch.Tensor] = None):
        # Pack sequence for proper RNN handling of padding
        if lengths is not None:
            x = pack_padded_sequence(x, lengths, batch_first=True)

        # Support custom initial state
        if hx is not None:
            output, hn = self.rnn(x, hx=hx)
        else:
            output, hn = self.rnn(x)

        # Unpack the packed sequence
        if lengths is not None:
            output, _ = pad_packed_sequence(output, batch_first=True)

        return output, hn
"""

LSTM_SPLIT = """\
class LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 5, batch_first=True)

    def forward(self, x, hx: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
                lengths: Optional[torch.Tensor] = None):
        # Pack sequence for proper RNN handling of padding
        if lengths is not None:
            x_packed = pack_padded_sequence(x, lengths, batch_first=True)

            # Support custom initial state
            if hx is not None:
                output, hn = self.rnn(x_packed, hx=hx)
            else:
                output, hn = self.rnn(x_packed)

            # Unpack the packed sequence
            output, _ = pad_packed_sequence(output, batch_first=True)
        else:
            # Support custom initial state
            if hx is not None:
                output, hn = self.rnn(x, hx=hx)
            else:
                output, hn = self.rnn(x)

        return output, hn
"""


def test_the_packed_input_gets_its_own_name_and_the_two_tests_become_one() -> None:
    result = rewrite(LSTM)
    assert result.text == HEADER + LSTM_SPLIT
    [change] = result.changes
    assert change.summary == (
        "x re-bound to a PackedSequence under `if lengths is not None:` in forward() at line "
        "17 is named x_packed, the two tests of that condition merged into one if/else "
        "(TorchScript keeps a name's type from the block that binds it first)")
    [fix] = result.fixes
    assert (fix.code, fix.line) == ("TSF119", 17)


def test_tsfix_check_names_the_rule_for_the_site() -> None:
    [finding] = [f for f in check_source(HEADER + LSTM, "m.py") if f.code == "TSF119"]
    assert (finding.line, finding.fix) == (17, "rebound-local")
    assert finding.message == ("'x' is a Tensor from an enclosing block and is assigned a "
                               "PackedSequence here")


# speechbrain's shape: the packing goes through a function of the file, which the walk of
# the types does not follow; the repair loop's compiler message says what the type is.
WRAPPED = """\
def pack(inputs, lengths):
    return pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)


class LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 5, batch_first=True)

    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        if lengths is not None:
            x = pack(x, lengths)
        output, hn = self.rnn(x)
        if lengths is not None:
            output, _ = pad_packed_sequence(output, batch_first=True)
        return output, hn
"""


def test_the_compilers_message_given_by_the_repair_loop_is_evidence_too() -> None:
    assert rewrite(WRAPPED).text == HEADER + WRAPPED
    observed = {"LSTM": {"forward": {
        "rebound x": "__torch__.torch.nn.utils.rnn.PackedSequence"}}}
    result = rewrite(WRAPPED, observed=observed)
    assert result.text == HEADER + WRAPPED.replace("""\
        if lengths is not None:
            x = pack(x, lengths)
        output, hn = self.rnn(x)
        if lengths is not None:
            output, _ = pad_packed_sequence(output, batch_first=True)
""", """\
        if lengths is not None:
            x_packed = pack(x, lengths)
            output, hn = self.rnn(x_packed)
            output, _ = pad_packed_sequence(output, batch_first=True)
        else:
            output, hn = self.rnn(x)
""")
    # Another name, or another method, is no evidence for this one.
    for other in ({"LSTM": {"forward": {"rebound y": "PackedSequence"}}},
                  {"LSTM": {"step": {"rebound x": "PackedSequence"}}}):
        assert rewrite(WRAPPED, observed=other).text == HEADER + WRAPPED


def refusal(body: str) -> str:
    """The one reason the rule gives for leaving ``body`` (a forward) as it is."""
    code = ("class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.rnn = nn.GRU(4, 4, batch_first=True)\n\n"
            + textwrap.indent(textwrap.dedent(body), "    "))
    result = rewrite(code)
    assert result.text == HEADER + code
    [skip] = result.skips
    assert skip.code == "TSF119"
    prefix = "'x' is a Tensor from an enclosing block and is assigned a PackedSequence here: "
    assert skip.reason.startswith(prefix) and skip.reason.endswith("; left as it is")
    return skip.reason[len(prefix):-len("; left as it is")]


PACK = "x = pack_padded_sequence(x, lengths, batch_first=True)"
UNPACK = "out, _ = pad_packed_sequence(out, batch_first=True)"


@pytest.mark.parametrize(("body", "why"), [
    (f"""\
     def forward(self, x, lengths: Optional[torch.Tensor] = None):
         if lengths is not None:
             {PACK}
         out, h = self.rnn(x)
         if lengths is not None:
             {UNPACK}
         return out, x
     """, "'x' is read after the later `if`, where it would hold the old value"),
    (f"""\
     def forward(self, x, lengths: Optional[torch.Tensor] = None, flag: bool = True):
         if flag:
             if lengths is not None:
                 {PACK}
             out, h = self.rnn(x)
             if lengths is not None:
                 {UNPACK}
         else:
             out = x
         return out + x.sum()
     """, "'x' is read after the later `if`, where it would hold the old value"),
    (f"""\
     def forward(self, x, lengths: Optional[torch.Tensor] = None):
         if lengths is not None:
             {PACK}
         else:
             x = x * 2
         out, h = self.rnn(x)
         if lengths is not None:
             {UNPACK}
         return out
     """, "the `if` has an else or elif"),
    (f"""\
     def forward(self, x, lengths: Optional[torch.Tensor] = None):
         if lengths is not None:
             {PACK}
         out, h = self.rnn(x)
         if lengths is not None:
             {UNPACK}
         else:
             out = out * 2
         return out
     """, "the later `if lengths is not None:` has an else or elif"),
    (f"""\
     def forward(self, x, lengths: Optional[torch.Tensor] = None):
         if lengths is not None:
             {PACK}
         out, h = self.rnn(x)
         lengths = None
         if lengths is not None:
             {UNPACK}
         return out
     """, "lengths (read by the test) is bound between the two tests"),
    (f"""\
     def forward(self, x, lengths: Optional[torch.Tensor] = None):
         if lengths is not None:
             {PACK}
         if bool(lengths is not None):
             x = x
         return x
     """, "no later `if lengths is not None:` in the same block consumes it (the new value "
          "would need a name past the branch)"),
    (f"""\
     def forward(self, x, lengths: Optional[torch.Tensor] = None):
         if lengths.sum() > 0:
             {PACK}
         out, h = self.rnn(x)
         if lengths.sum() > 0:
             {UNPACK}
         return out
     """, "its test `lengths.sum() > 0` is not only names compared with None (evaluated once "
          "instead of twice, it must give the same answer)"),
    (f"""\
     def forward(self, x, lengths: Optional[torch.Tensor] = None):
         if lengths is not None:
             {PACK}
         out, h = self.rnn(x)
         f = lambda t: t * 2
         if lengths is not None:
             {UNPACK}
         return out
     """, "`lambda t: t * 2` between the two tests"),
    (f"""\
     def forward(self, x, lengths: Optional[torch.Tensor] = None):
         out = x
         for i in range(2):
             if lengths is not None:
                 {PACK}
             out, h = self.rnn(x)
             if lengths is not None:
                 {UNPACK}
         return out
     """, "it is inside a loop, whose next iteration would read the old value"),
])
def test_each_refusal_says_why(body: str, why: str) -> None:
    assert refusal(body) == why


def test_a_rebinding_bound_again_between_the_tests_is_left() -> None:
    code = f"""\
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(4, 4, batch_first=True)

    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        if lengths is not None:
            {PACK}
        x, h = self.rnn(x)
        if lengths is not None:
            x, _ = pad_packed_sequence(x, batch_first=True)
        return x
"""
    result = rewrite(code)
    assert result.text == HEADER + code
    assert [s.reason.split(": ", 1)[1] for s in result.skips] == [
        "'x' is bound again between the two tests; left as it is"]


def test_the_new_name_is_fresh() -> None:
    code = LSTM.replace("output, hn = self.rnn(x)\n", "output, hn = self.rnn(x)\n"
                        "        x_packed = 1\n", 1)
    assert "x_packed2 = pack_padded_sequence(" in rewrite(code).text


@pytest.mark.slow
def test_the_split_method_scripts_with_parity_and_survives_save_and_load(
        tmp_path: Path) -> None:
    import torch

    def load(name: str, text: str) -> ModuleType:
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    before = load("rebound_before", HEADER + LSTM)
    after = load("rebound_after", rewrite(LSTM).text)
    original = before.LSTM().eval()
    with pytest.raises(RuntimeError, match="previously had type Tensor"):
        torch.jit.script(original)
    split = after.LSTM().eval()
    split.load_state_dict(original.state_dict())
    scripted = torch.jit.script(split)
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    x = torch.randn(2, 6, 4)
    state = (torch.randn(1, 2, 5), torch.randn(1, 2, 5))
    with torch.no_grad():
        for kwargs in ({}, {"lengths": torch.tensor([6, 3])}, {"hx": state},
                       {"hx": state, "lengths": torch.tensor([5, 2])}):
            want = original(x, **kwargs)
            for model in (split, scripted, loaded):
                got = model(x, **kwargs)
                assert torch.equal(got[0], want[0]) and torch.equal(got[1][0], want[1][0])


# nystrom-attention's landmarks (and hourglass-transformer's padded_mask): a name bound only
# under `if mask is not None:` and read under a later one, "mask_landmarks is not defined in
# the false branch" (TSF246).
LANDMARKS = """\
class Landmarks(nn.Module):
    def forward(self, x, mask: Optional[torch.Tensor] = None):
        divisor = 2
        if mask is not None:
            total = mask.sum(-1)
            landmarks = total > 0
        sim = x / divisor
        if mask is not None:
            sim = sim.masked_fill(~landmarks[..., None], 0.0)
        return sim
"""
LANDMARKS_MERGED = """\
class Landmarks(nn.Module):
    def forward(self, x, mask: Optional[torch.Tensor] = None):
        divisor = 2
        if mask is not None:
            total = mask.sum(-1)
            landmarks = total > 0
            sim = x / divisor
            sim = sim.masked_fill(~landmarks[..., None], 0.0)
        else:
            sim = x / divisor
        return sim
"""


def test_a_name_bound_only_under_a_none_test_merges_the_two_tests() -> None:
    result = rewrite(LANDMARKS)

    assert result.text == HEADER + LANDMARKS_MERGED
    [fix] = result.fixes
    assert (fix.code, fix.line) == ("TSF246", 11)
    [change] = result.changes
    assert change.summary.startswith("landmarks bound only under `if mask is not None:` in "
                                     "forward() at line 11: the two tests of that condition "
                                     "merged into one if/else"), change.summary


@pytest.mark.parametrize(("old", "new"), [
    # bound before the test too: it is bound on both paths, nothing to merge
    ("        divisor = 2\n", "        divisor = 2\n        landmarks = x > 0\n"),
    # the later test is another one
    ("        if mask is not None:\n            sim = sim",
     "        if x is not None:\n            sim = sim"),
    # a test that is not names compared with None may not give the same answer twice
    ("        if mask is not None:\n            total",
     "        if x.sum() > 0:\n            total"),
])
def test_a_name_bound_on_both_paths_or_under_other_tests_is_no_such_site(old: str,
                                                                        new: str) -> None:
    code = LANDMARKS.replace(old, new, 1)
    assert code != LANDMARKS
    result = rewrite(code)
    assert not result.changed and not any(f.code == "TSF246" for f in result.fixes)


@pytest.mark.slow
def test_the_merged_tests_script_with_the_originals_outputs(tmp_path: Path) -> None:
    import torch

    path = tmp_path / "landmarks_before.py"
    path.write_text(HEADER + LANDMARKS)
    after_path = tmp_path / "landmarks_after.py"
    after_path.write_text(rewrite(LANDMARKS).text)
    before = load_module(path, "landmarks_before")
    after = load_module(after_path, "landmarks_after")
    with pytest.raises(RuntimeError, match="landmarks is not defined in the false branch"):
        torch.jit.script(before.Landmarks())
    scripted = torch.jit.script(after.Landmarks())
    torch.manual_seed(0)
    x, mask = torch.randn(2, 3, 4), torch.rand(2, 3, 5) > 0.5
    for args in ((x,), (x, mask)):
        want = before.Landmarks()(*args)
        assert torch.equal(after.Landmarks()(*args), want)
        assert torch.equal(scripted(*args), want)


# egnn-pytorch: "Variable 'valid_radius' previously had type float but is now being assigned to
# a value of type int".
RADIUS = """\
class Radius(nn.Module):
    def __init__(self, valid_radius=float("inf"), only_sparse_neighbors=False):
        super().__init__()
        self.valid_radius = valid_radius
        self.only_sparse_neighbors = only_sparse_neighbors

    def forward(self, feats, rel_dist):
        valid_radius, sparse = self.valid_radius, self.only_sparse_neighbors
        if sparse:
            valid_radius = 0
        return feats * (rel_dist <= valid_radius)
"""


def test_a_float_name_given_an_int_literal_gets_the_float_literal() -> None:
    result = rewrite(RADIUS)

    assert result.text == HEADER + RADIUS.replace("valid_radius = 0\n", "valid_radius = 0.0\n")
    [fix] = result.fixes
    assert (fix.code, fix.line) == ("TSF119", 17)
    # Another value than a literal is no such site (a split, or its refusal, decides).
    assert "valid_radius = 0.0" not in rewrite(RADIUS.replace("valid_radius = 0\n",
                                                              "valid_radius = len(feats)\n")).text


@pytest.mark.slow
def test_the_widened_literal_scripts_with_the_originals_outputs(tmp_path: Path) -> None:
    import torch

    (tmp_path / "radius_before.py").write_text(HEADER + RADIUS)
    (tmp_path / "radius_after.py").write_text(rewrite(RADIUS).text)
    before = load_module(tmp_path / "radius_before.py", "radius_before")
    after = load_module(tmp_path / "radius_after.py", "radius_after")
    with pytest.raises(RuntimeError, match="previously had type float"):
        torch.jit.script(before.Radius())
    feats, dist = torch.randn(3, 4), torch.rand(3, 4)
    for init in ({}, {"only_sparse_neighbors": True}, {"valid_radius": 0.5}):
        want = before.Radius(**init)(feats, dist)
        assert torch.equal(after.Radius(**init)(feats, dist), want)
        assert torch.equal(torch.jit.script(after.Radius(**init))(feats, dist), want)
