"""modulelist-iter: each loop shape it rewrites, each it refuses (with the reason), the names it
picks, and the fixture pairs (without and with validation)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import (
    FIXTURES_ROOT,
    apply_with_report,
    copy_fixture,
    fixture_pairs,
    load_module,
    rule_rewriter,
)
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.modulelist_iter import ModuleListIter

FIXTURES = FIXTURES_ROOT / "modulelist-iter"
BLOCKERS = FIXTURES_ROOT / "check" / "blockers.py"


rewrite = rule_rewriter(ModuleListIter)


def reasons(result: Rewrite) -> list[str]:
    return [s.reason for s in result.skips]


def body(result: Rewrite) -> str:
    """The rewritten forward(), dedented, for exact comparisons."""
    text = result.text
    start = text.index("    def forward")
    return textwrap.dedent(text[start:])


def model(init: str, forward: str,
          imports: str = "from typing import List\nimport torch\nimport torch.nn as nn\n") -> str:
    return (imports + "class M(nn.Module):\n    def __init__" + textwrap.indent(
        textwrap.dedent(init), "    ").lstrip() + "\n" + textwrap.indent(
        textwrap.dedent(forward), "    "))


LAYERS = """\
(self, num_layers=3, dim=4):
    super().__init__()
    self.num_layers = num_layers
    self.layers = nn.ModuleList([nn.Linear(dim, dim) for _ in range(num_layers)])
    self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(num_layers)])
    self.other = nn.ModuleList([nn.Linear(dim, dim) for _ in range(dim)])
"""


# ---- rewritten shapes --------------------------------------------------------------------------

def test_range_len_becomes_plain_iteration() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
        """)
    change = result.changes[0]
    assert change.class_name == "M" and change.rule == "modulelist-iter"
    assert "`for i in range(len(self.layers))` -> `for layer in self.layers`" in change.summary
    assert change.notes == []


@pytest.mark.parametrize("loop", [
    "for i in range(self.num_layers):",
    "for i in range(0, self.num_layers):",
    "n = self.num_layers\nfor i in range(n):",
    "n = len(self.layers)\nfor i in range(n):",
])
def test_ranges_that_provably_equal_the_length(loop: str) -> None:
    forward = "def forward(self, x):\n" + textwrap.indent(
        loop + "\n    x = self.layers[i](x)\nreturn x\n", "    ")
    result = rewrite(model(LAYERS, forward))
    kept = loop.splitlines()[:-1]       # the `n = ...` line stays
    assert body(result) == "def forward(self, x):\n" + textwrap.indent(
        "\n".join([*kept, "for layer in self.layers:", "    x = layer(x)", "return x"]) + "\n",
        "    "), reasons(result)


def test_several_lists_are_zipped_in_init_order_and_index_kept_for_tensor_lists() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x, hidden: List[torch.Tensor]):
            for i in range(self.num_layers):
                x = self.norms[i](self.layers[i](x)) + hidden[i]
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x, hidden: List[torch.Tensor]):
            for i, (layer, norm) in enumerate(zip(self.layers, self.norms)):
                x = norm(layer(x)) + hidden[i]
            return x
        """)


def test_index_read_after_the_loop_is_kept() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            return x * i
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
            return x * i
        """)


def test_index_rebound_by_a_later_loop_is_not_kept() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            for i in range(3):
                x = x + i
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            for i in range(3):
                x = x + i
            return x
        """)


def test_reversed_range_uses_a_reversed_slice_called_through_forward() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            for i in reversed(range(len(self.layers))):
                x = self.norms[i](self.layers[i](x))
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for layer, norm in zip(self.layers[::-1], self.norms[::-1]):
                x = norm.forward(layer.forward(x))
            return x
        """)
    [note] = result.changes[0].notes
    assert "self.layers[::-1], self.norms[::-1]" in note and "hooks" in note


def test_reversed_range_with_index_recomputes_it() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x, skips: List[torch.Tensor]):
            for i in range(len(self.layers) - 1, -1, -1):
                x = self.layers[i](x) + skips[i]
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x, skips: List[torch.Tensor]):
            for i_rev, layer in enumerate(self.layers[::-1]):
                i = len(self.layers) - 1 - i_rev
                x = layer.forward(x) + skips[i]
            return x
        """)


def test_reversed_list_becomes_a_slice() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            for up in reversed(self.layers):
                x = up(x) + up.bias
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for up in self.layers[::-1]:
                x = up.forward(x) + up.bias
            return x
        """)
    assert result.changes[0].notes == [
        "line 14: elements of self.layers[::-1] are called through .forward(...), which skips "
        "their forward hooks and pre-hooks in eager mode"]
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF202", 14, "reversed(self.layers)")]


def test_enumerate_loop_indexing_another_list_zips_it() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = self.norms[i](layer(x))
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for layer, norm in zip(self.layers, self.norms):
                x = norm(layer(x))
            return x
        """)


@pytest.mark.parametrize(("imports", "base", "constructor"), [
    ("import torch\n", "torch.nn.Module",
     "torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(n)])"),
    ("from torch.nn import Linear, Module, ModuleList\n", "Module",
     "ModuleList([Linear(4, 4) for _ in range(n)])"),
    ("import torch.nn as nn\n", "nn.Module",
     "nn.Sequential(*[nn.Linear(4, 4) for _ in range(n)])"),
    ("from torch import nn\n", "nn.Module",
     "nn.Sequential(*(nn.Linear(4, 4) for _ in range(n)))"),
    ("from torch.nn import Linear, Module\nfrom torch.nn import ModuleList as Stack\n", "Module",
     "Stack([Linear(4, 4) for _ in range(n)])"),
])
def test_container_spellings(imports: str, base: str, constructor: str) -> None:
    code = imports + textwrap.dedent(f"""
        class M({base}):
            def __init__(self, n=2):
                super().__init__()
                self.n = n
                self.blocks = {constructor}
            def forward(self, x):
                for i in range(self.n):
                    x = self.blocks[i](x)
                return x
        """)
    result = rewrite(code)
    assert result.text == code.replace(
        "        for i in range(self.n):\n            x = self.blocks[i](x)\n",
        "        for block in self.blocks:\n            x = block(x)\n"), reasons(result)


def test_length_attribute_and_list_sized_from_another_list() -> None:
    result = rewrite(model("""
        (self, widths=(4, 4)):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(w, w) for w in widths])
            self.depth = len(self.layers)
            self.gates = nn.ModuleList([nn.Linear(4, 1) for _ in range(len(self.layers))])
        """, """
        def forward(self, x):
            for i in range(self.depth):
                x = self.layers[i](x) * self.gates[i](x)
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for layer, gate in zip(self.layers, self.gates):
                x = layer(x) * gate(x)
            return x
        """), reasons(result)


def test_list_filled_by_append_in_one_loop() -> None:
    result = rewrite(model("""
        (self, depth=3):
            super().__init__()
            self.depth = depth
            self.downs = nn.ModuleList()
            self.ups = nn.ModuleList()
            for k in range(depth):
                self.downs.append(nn.Linear(4, 4))
                self.ups.append(nn.Linear(4, 4))
        """, """
        def forward(self, x):
            for i in range(self.depth):
                x = self.ups[i](self.downs[i](x))
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for down, up in zip(self.downs, self.ups):
                x = up(down(x))
            return x
        """)


def test_literal_count_and_literal_range() -> None:
    result = rewrite(model("""
        (self):
            super().__init__()
            self.stages = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
        """, """
        def forward(self, x):
            for i in range(3):
                x = self.stages[i](x)
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for stage in self.stages:
                x = stage(x)
            return x
        """)


def test_sibling_loops_reuse_the_element_name_and_existing_names_are_avoided() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            layer = 2
            for i in range(len(self.layers)):
                x = self.layers[i](x) * layer
            for i in range(len(self.norms)):
                x = self.norms[i](x)
            for i in range(len(self.norms)):
                x = self.norms[i](x)
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            layer = 2
            for layer_module in self.layers:
                x = layer_module(x) * layer
            for norm in self.norms:
                x = norm(x)
            for norm in self.norms:
                x = norm(x)
            return x
        """)


def test_singular_names() -> None:
    from tsfix.codemods.rules.modulelist_iter import element_name as _element_name

    taken: set[str] = set()
    assert [_element_name(a, "list", taken) for a in
            ("layers", "blocks", "downs", "convs", "heads", "stages", "_branches", "bodies",
             "conv_list", "body", "process")] == [
        "layer", "block", "down", "conv", "head", "stage", "branch", "body", "conv",
        "body_layer", "process_layer"]
    assert _element_name("classes", "list", set()) == "class_module"   # 'class' is a keyword


def test_a_loop_in_a_nested_block_does_not_reuse_an_outer_loops_name() -> None:
    """TorchScript rejects rebinding a module-typed loop variable in a nested block
    ("Cannot re-assign 'layer' to a value of type module"), measured on torch 2.13."""
    result = rewrite(model(LAYERS, """
        def forward(self, x, flag: bool):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            if flag:
                for i in range(len(self.layers)):
                    x = self.layers[i](x)
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x, flag: bool):
            for layer in self.layers:
                x = layer(x)
            if flag:
                for layer_module in self.layers:
                    x = layer_module(x)
            for layer in self.layers:
                x = layer(x)
            return x
        """)


def test_an_existing_outer_loop_name_is_not_reused_in_a_nested_block() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x, flag: bool):
            for layer in self.layers:
                x = layer(x)
            if flag:
                for i in range(len(self.layers)):
                    x = self.layers[i](x)
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x, flag: bool):
            for layer in self.layers:
                x = layer(x)
            if flag:
                for layer_module in self.layers:
                    x = layer_module(x)
            return x
        """)


def test_moduledict_lookups_in_nested_blocks_get_their_own_names() -> None:
    result = rewrite(model(HEADS, """
        def forward(self, x, task: str, again: bool):
            y = self.heads[task](x)
            if again:
                y = self.heads[task](y)
            return y
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x, task: str, again: bool):
            head_out: Optional[torch.Tensor] = None
            for name, head in self.heads.items():
                if name == task:
                    head_out = head(x)
            if head_out is None:
                raise KeyError(task)
            y = head_out
            if again:
                head_out2: Optional[torch.Tensor] = None
                for head_name, head_item in self.heads.items():
                    if head_name == task:
                        head_out2 = head_item(y)
                if head_out2 is None:
                    raise KeyError(task)
                y = head_out2
            return y
        """)


def test_nested_loops_pick_distinct_names() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            for i in range(len(self.layers)):
                for j in range(len(self.norms)):
                    x = self.norms[j](self.layers[i](x))
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for layer in self.layers:
                for norm in self.norms:
                    x = norm(layer(x))
            return x
        """)


# ---- ModuleDict --------------------------------------------------------------------------------

HEADS = """\
(self):
    super().__init__()
    self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})
"""


def test_moduledict_variable_key_becomes_a_name_match() -> None:
    result = rewrite(model(HEADS, """
        def forward(self, x, task: str):
            # pick the head
            y = self.heads[task](x) * 2
            return y
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x, task: str):
            # pick the head
            head_out: Optional[torch.Tensor] = None
            for name, head in self.heads.items():
                if name == task:
                    head_out = head(x)
            if head_out is None:
                raise KeyError(task)
            y = head_out * 2
            return y
        """)
    assert result.text.startswith("from typing import List, Optional\n")


def test_moduledict_names_avoid_existing_ones_and_use_imported_tensor() -> None:
    result = rewrite(model(HEADS, """
        def forward(self, x, name: str):
            head = x
            return self.heads[name](head)
        """, imports="from torch import Tensor, nn\n"))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x, name: str):
            head = x
            head_out: Optional[Tensor] = None
            for head_name, head_item in self.heads.items():
                if head_name == name:
                    head_out = head_item(head)
            if head_out is None:
                raise KeyError(name)
            return head_out
        """)
    assert result.text.startswith("from typing import Optional\n\nfrom torch import Tensor, nn\n")


def test_moduledict_key_loop_iterates_items_or_values() -> None:
    result = rewrite(model(HEADS, """
        def forward(self, x):
            out = {}
            for k in self.heads:
                out[k] = self.heads[k](x)
            total = x.sum()
            for k in self.heads.keys():
                total = total + self.heads[k](x).sum()
            return out, total
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            out = {}
            for k, head in self.heads.items():
                out[k] = head(x)
            total = x.sum()
            for head in self.heads.values():
                total = total + head(x).sum()
            return out, total
        """)


# ---- the enumerate+if form ----------------------------------------------------------------------

@pytest.mark.parametrize(("forward", "expected"), [
    # An offset that stays in range: no check, and no match from the end.
    ("""
     def forward(self, x):
         for i in range(1, len(self.layers)):
             x = x + self.layers[i - 1](x)
         return x
     """, """
     def forward(self, x):
         for i in range(1, len(self.layers)):
             for j, layer in enumerate(self.layers):
                 if j == i - 1:
                     x = x + layer(x)
         return x
     """),
    # A stop one past the length, read back by the offset: still in range.
    ("""
     def forward(self, x):
         for i in range(1, self.num_layers + 1):
             x = self.layers[i - 1](x)
         return x
     """, """
     def forward(self, x):
         for i in range(1, self.num_layers + 1):
             for j, layer in enumerate(self.layers):
                 if j == i - 1:
                     x = layer(x)
         return x
     """),
    # A partial range of another length source: the list's IndexError is checked first.
    ("""
     def forward(self, x, n: int):
         for i in range(n):
             x = self.layers[i](x)
         return x
     """, """
     def forward(self, x, n: int):
         for i in range(n):
             if i >= len(self.layers):
                 raise IndexError(f"index {i} is out of range")
             for j, layer in enumerate(self.layers):
                 if j == i:
                     x = layer(x)
         return x
     """),
    # `break` stays in the range loop, where TorchScript takes it.
    ("""
     def forward(self, x):
         for i in range(len(self.layers)):
             x = self.layers[i](x)
             if x.sum() > 0:
                 break
         return x
     """, """
     def forward(self, x):
         for i in range(len(self.layers)):
             for j, layer in enumerate(self.layers):
                 if j == i:
                     x = layer(x)
             if x.sum() > 0:
                 break
         return x
     """),
    # An index that may be negative counts from the end, as the list does.
    ("""
     def forward(self, x, k: int):
         y = x * 2
         y = self.layers[k](y) + x
         return y
     """, """
     def forward(self, x, k: int):
         y = x * 2
         if not -len(self.layers) <= k < len(self.layers):
             raise IndexError(f"index {k} is out of range")
         for j, layer in enumerate(self.layers):
             if j == k or j == k + len(self.layers):
                 y = layer(y) + x
         return y
     """),
    # A reassigned counter: an int still, but no longer bounded.
    ("""
     def forward(self, x):
         for i in range(len(self.layers)):
             x = self.layers[i](x)
             i = i + 1
         return x
     """, """
     def forward(self, x):
         for i in range(len(self.layers)):
             if not -len(self.layers) <= i < len(self.layers):
                 raise IndexError(f"index {i} is out of range")
             for j, layer in enumerate(self.layers):
                 if j == i or j == i + len(self.layers):
                     x = layer(x)
             i = i + 1
         return x
     """),
    # A return: the element's call is returned from inside the loop; the error follows it.
    ("""
     def forward(self, x, k: int):
         return self.layers[k](x)
     """, """
     def forward(self, x, k: int):
         for j, layer in enumerate(self.layers):
             if j == k or j == k + len(self.layers):
                 return layer(x)
         raise IndexError(f"index {k} is out of range")
     """),
    # A name bound for the first time: the result is bound before the statement.
    ("""
     def forward(self, x, k: int):
         y = torch.tanh(self.layers[k](x)) * 2
         return y
     """, """
     def forward(self, x, k: int):
         if not -len(self.layers) <= k < len(self.layers):
             raise IndexError(f"index {k} is out of range")
         layer_out: Optional[torch.Tensor] = None
         for j, layer in enumerate(self.layers):
             if j == k or j == k + len(self.layers):
                 layer_out = layer(x)
         assert layer_out is not None
         y = torch.tanh(layer_out) * 2
         return y
     """),
    # `name = call` where nothing else binds the name: the name itself holds the result.
    ("""
     def forward(self, x):
         outs = [x]
         for k in range(1, self.num_layers):
             out_k = self.layers[k](outs[-1])
             outs.append(out_k)
         return outs[-1]
     """, """
     def forward(self, x):
         outs = [x]
         for k in range(1, self.num_layers):
             out_k: Optional[torch.Tensor] = None
             for j, layer in enumerate(self.layers):
                 if j == k:
                     out_k = layer(outs[-1])
             assert out_k is not None
             outs.append(out_k)
         return outs[-1]
     """),
    # Bound earlier in an enclosing block: assigned in place.
    ("""
     def forward(self, x):
         h = x
         for i in range(1, self.num_layers):
             if h.sum() > 0:
                 h = self.layers[i](x)
         return h
     """, """
     def forward(self, x):
         h = x
         for i in range(1, self.num_layers):
             if h.sum() > 0:
                 for j, layer in enumerate(self.layers):
                     if j == i:
                         h = layer(x)
         return h
     """),
    # Two elements in one statement: nested selections, distinct names.
    ("""
     def forward(self, x):
         for i in range(1, len(self.layers)):
             x = self.layers[i](x) - self.layers[i - 1](x)
         return x
     """, """
     def forward(self, x):
         for i in range(1, len(self.layers)):
             for j, layer in enumerate(self.layers):
                 if j == i:
                     for j2, layer_module in enumerate(self.layers):
                         if j2 == i - 1:
                             x = layer(x) - layer_module(x)
         return x
     """),
])
def test_selected_elements(forward: str, expected: str) -> None:
    result = rewrite(model(LAYERS, forward))
    assert body(result) == textwrap.dedent(expected).lstrip("\n"), reasons(result)
    assert result.skips == [] and {f.code for f in result.fixes} == {"TSF201"}


@pytest.mark.parametrize(("forward", "expected"), [
    # torchaudio's HDemucs: an element of a shorter list, bound to a name, under a test that
    # keeps the index in range (no check); the statement after the last use stays put.
    ("""
     def forward(self, x, n: int):
         for i in range(n):
             x = x + 1
             if i < len(self.layers):
                 layer = self.layers[i]
                 h = layer(x)
                 if layer.in_features > 2:
                     x = h
             x = x * 2
         return x
     """, """
     def forward(self, x, n: int):
         for i in range(n):
             x = x + 1
             if i < len(self.layers):
                 for j, layer in enumerate(self.layers):
                     if j == i:
                         h = layer(x)
                         if layer.in_features > 2:
                             x = h
             x = x * 2
         return x
     """),
    # HDemucs' decoder: `if i >= offset:` keeps `i - offset` non-negative; its upper end is
    # checked. A statement between the binding and the first use moves too.
    ("""
     def forward(self, x):
         for i, other in enumerate(self.other):
             x = other(x)
             offset = len(self.other) - len(self.layers)
             if i >= offset:
                 layer = self.layers[i - offset]
                 n = x.shape[0]
                 x = layer(x)[:n]
         return x
     """, """
     def forward(self, x):
         for i, other in enumerate(self.other):
             x = other(x)
             offset = len(self.other) - len(self.layers)
             if i >= offset:
                 if i - offset >= len(self.layers):
                     raise IndexError(f"index {i - offset} is out of range")
                 for j, layer in enumerate(self.layers):
                     if j == i - offset:
                         n = x.shape[0]
                         x = layer(x)[:n]
         return x
     """),
    # An int argument, checked both ways; a selection before the binding and two inside the
    # moved statements keep their own forms.
    ("""
     def forward(self, x, k: int):
         y = self.other[k](x)
         layer = self.layers[k]
         y = self.norms[k](y)
         y = layer(y) + self.layers[k - 1](y)
         x = x + y
         return x
     """, """
     def forward(self, x, k: int):
         if not -len(self.other) <= k < len(self.other):
             raise IndexError(f"index {k} is out of range")
         other_out: Optional[torch.Tensor] = None
         for j, other_layer in enumerate(self.other):
             if j == k or j == k + len(self.other):
                 other_out = other_layer(x)
         assert other_out is not None
         y = other_out
         if not -len(self.layers) <= k < len(self.layers):
             raise IndexError(f"index {k} is out of range")
         for j2, layer in enumerate(self.layers):
             if j2 == k or j2 == k + len(self.layers):
                 if not -len(self.norms) <= k < len(self.norms):
                     raise IndexError(f"index {k} is out of range")
                 for j, norm in enumerate(self.norms):
                     if j == k or j == k + len(self.norms):
                         y = norm(y)
                 if not -len(self.layers) <= k - 1 < len(self.layers):
                     raise IndexError(f"index {k - 1} is out of range")
                 for j, layer_module in enumerate(self.layers):
                     if j == k - 1 or j == k - 1 + len(self.layers):
                         y = layer(y) + layer_module(y)
         x = x + y
         return x
     """),
])
def test_an_element_bound_to_a_name_moves_with_the_statements_using_it(
        forward: str, expected: str) -> None:
    result = rewrite(model(LAYERS, forward))
    assert body(result) == textwrap.dedent(expected).lstrip("\n"), reasons(result)
    assert result.skips == [] and {f.code for f in result.fixes} == {"TSF201"}


def test_a_test_on_a_name_the_guarded_block_rebinds_proves_nothing() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x, i: int):
            if 0 <= i < len(self.layers):
                i = i + 1
                layer = self.layers[i]
                x = layer(x)
            return x
        """))
    assert "if not -len(self.layers) <= i < len(self.layers):" in body(result)
    chained = rewrite(model(LAYERS, """
        def forward(self, x, i: int):
            if 0 <= i < len(self.layers):
                layer = self.layers[i]
                x = layer(x)
            return x
        """))
    assert "raise IndexError" not in body(chained) and "if j == i:" in body(chained)


@pytest.mark.parametrize(("forward", "reason"), [
    ("""
     def forward(self, x, k: int):
         layer = self.layers[k]
         x = layer(x)
         layer = self.norms[k]
         return layer(x)
     """, "`layer`, bound to self.layers[k], is bound elsewhere in the method too"),
    ("""
     def forward(self, x, k: int):
         layer = self.layers[k]
         return apply(layer, x)
     """, "`layer` is used other than by calling it or reading an attribute "
          "(`apply(layer, x)`)"),
    ("""
     def forward(self, x, k: int):
         layer = self.layers[k]
         if layer.in_features > 2:
             return layer(x)
         x = layer(x) * 2
         return x
     """, "a `return` among the statements using `layer` (TorchScript would give the method "
          "an Optional result)"),
    ("""
     def forward(self, x, n: int):
         for i in range(1, n):
             layer = self.layers[i]
             if x.sum() > 0:
                 continue
             x = layer(x)
         return x
     """, "a `break`/`continue` among the statements using `layer` would leave the new loop "
          "over the list instead of its own"),
    ("""
     def forward(self, x, k: int):
         layer = self.layers[k]
         k = k + 1
         x = layer(x)
         return x
     """, "the statements using `layer` bind `k`, which the index reads: later elements would "
          "be compared with another value"),
    ("""
     def forward(self, x, k: int):
         layer = self.layers[k]
         y = layer(x)
         return y
     """, "`y` is bound by the statements using `layer` and read outside them with no binding "
          "on every path before them (TorchScript would find it undefined where no element "
          "matched)"),
    ("""
     def forward(self, x, k: int):
         if k > 0:
             layer = self.layers[k]
             x = layer(x)
         else:
             x = layer(x)
         return x
     """, "`layer`, bound to self.layers[k], is read outside the block that binds it"),
    ("""
     def forward(self, x, k: int):
         layer = self.layers[k]
         return x
     """, "`layer`, bound to self.layers[k], is never used"),
])
def test_an_element_bound_to_a_name_is_refused_where_moving_would_change_meaning(
        forward: str, reason: str) -> None:
    result = rewrite(model(LAYERS, forward))
    assert not result.changed
    first = reasons(result)[0]
    assert f"the enumerate+if form does not apply: {reason}; not rewritten" in first, first


def test_an_attribute_set_to_an_int_in_init_is_an_index() -> None:
    """``self.last`` derives from a parameter annotated int: an int for certain. Outside any
    loop, and possibly negative: matched from the end too."""
    result = rewrite(model("""
        (self, num_layers: int = 3):
            super().__init__()
            self.last = num_layers - 1
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(num_layers)])
        """, """
        def forward(self, x):
            return self.layers[self.last](x)
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for j, layer in enumerate(self.layers):
                if j == self.last or j == self.last + len(self.layers):
                    return layer(x)
            raise IndexError(f"index {self.last} is out of range")
        """), reasons(result)


def test_lists_of_other_lengths_in_one_loop_mix_both_forms() -> None:
    """The covered list is iterated; the one of another length keeps its index, selected."""
    result = rewrite(model("""
        (self, a=2, b=2):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(a)])
            self.norms = nn.ModuleList([nn.LayerNorm(4) for _ in range(b)])
        """, """
        def forward(self, x):
            for i in range(len(self.layers)):
                x = self.norms[i](self.layers[i](x))
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for i, layer in enumerate(self.layers):
                if i >= len(self.norms):
                    raise IndexError(f"index {i} is out of range")
                for j, norm in enumerate(self.norms):
                    if j == i:
                        x = norm(layer(x))
            return x
        """)
    summary = result.changes[0].summary
    assert "`for i in range(len(self.layers))` -> `for i, layer in enumerate(self.layers)`" in (
        summary)
    assert "`self.norms[i]` -> the element matched in a loop over enumerate(self.norms)" in (
        summary)


def test_length_from_a_reassigned_argument_is_not_trusted() -> None:
    """The range is not shown to equal the list's length: no iteration, and the index is
    checked against the list."""
    result = rewrite(model("""
        (self, n=2):
            super().__init__()
            self.n = n
            n = n + 1
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
        """, """
        def forward(self, x):
            for i in range(self.n):
                x = self.layers[i](x)
            return x
        """))
    assert "for layer in self.layers" not in result.text
    assert "if i >= len(self.layers):" in body(result)


def test_result_form_notes_the_tensor_assumption_and_imports_optional() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x, k: int):
            y = self.layers[k](x) * 2
            return y
        """))
    assert result.changes[0].notes == [
        "line 14: the selected module's result is taken to be a Tensor (layer_out: "
        "Optional[torch.Tensor], asserted not None after the loop)"]
    assert result.text.startswith("from typing import List, Optional\n")


def test_comments_stay_with_the_statement() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x, k: int):
            # the k-th level
            out_k = self.layers[k](x)  # keep me
            x = self.layers[k](out_k)  # and me
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x, k: int):
            # the k-th level
            if not -len(self.layers) <= k < len(self.layers):
                raise IndexError(f"index {k} is out of range")
            out_k: Optional[torch.Tensor] = None
            for j, layer in enumerate(self.layers):
                if j == k or j == k + len(self.layers):
                    out_k = layer(x)  # keep me
            assert out_k is not None
            if not -len(self.layers) <= k < len(self.layers):
                raise IndexError(f"index {k} is out of range")
            for j, layer in enumerate(self.layers):
                if j == k or j == k + len(self.layers):
                    x = layer(out_k)  # and me
            return x
        """)


def test_select_names_avoid_names_in_use_and_nested_rebinding() -> None:
    """The counter avoids a name the method uses; an element name bound in an enclosing block is
    not bound again in a nested one (TorchScript rejects that), while sibling blocks share."""
    result = rewrite(model(LAYERS, """
        def forward(self, x, k: int, flag: bool):
            j = 1
            x = self.layers[k](x) * j
            if flag:
                x = self.layers[k](x)
            else:
                x = self.layers[k](x)
            return x
        """))
    text = body(result)
    assert "for j2, layer in enumerate(self.layers):" in text.splitlines()[4]
    nested = [line.strip() for line in text.splitlines()
              if line.startswith("        for ")]
    assert nested == ["for j2, layer_module in enumerate(self.layers):"] * 2, text


# ---- refused, with the reason ------------------------------------------------------------------

@pytest.mark.parametrize(("forward", "reason"), [
    ("""
     def forward(self, x):
         for i in range(len(self.layers)):
             x = self.layers[i](x)
         else:
             x = x + 1
         return x
     """, "has an `else` clause, which TorchScript does not support either"),
    ("""
     def forward(self, x):
         return [self.layers[i](x) for i in range(len(self.layers))]
     """, "inside a lambda or comprehension"),
    ("""
     def forward(self, x, k):
         return self.layers[k](x)
     """, "the index `k` of self.layers[k] is not known to be an int"),
    ("""
     def forward(self, x, k: float):
         return self.layers[int(k)](x)
     """, "the index `int(k)` of self.layers[int(k)] is not known to be an int"),
    # A float default is no int (an int default is: TorchScript and annotate type it int).
    ("""
     def forward(self, x, k=0.0):
         return self.layers[k](x)
     """, "the index `k` of self.layers[k] is not known"),
    ("""
     def forward(self, x, k: int):
         return self.layers[k].weight
     """, "self.layers[k] is used other than by calling it"),
    ("""
     def forward(self, x, k: int):
         h, c = self.layers[k](x)
         return h
     """, "the call's result is unpacked"),
    ("""
     def forward(self, x, k: int):
         state = self.layers[k](x)
         h, c = state
         return h
     """, "`state` is unpacked later (`h, c = state`)"),
    ("""
     def forward(self, x, k: int):
         y = self.norms[0](x) + self.layers[k](x)
         return y
     """, "`self.norms[0](...)` runs before the indexed call"),
    ("""
     def forward(self, x, k: int):
         y = self.layers[k](x) + self.other[k](x)
         return y
     """, "binds `y` for the first time and calls several indexed elements"),
    ("""
     def forward(self, x, k: int):
         if self.layers[k](x).sum() > 0:
             x = x + 1
         return x
     """, "in the header of a compound statement"),
    ("""
     def forward(self, x, k: int):
         if k: x = self.layers[k](x)
         return x
     """, "shares its line with the statement it is under"),
    ("""
     def forward(self, x, k: int):
         x = x + 1; x = self.layers[k](x)
         return x
     """, "the statement shares its line with others"),
    ("""
     def forward(self, x, k: int):
         return x if k < 0 else self.layers[k](x)
     """, "inside a conditional expression"),
    ("""
     def forward(self, x, k: int):
         return k < 0 or self.layers[k](x)
     """, "evaluated only conditionally"),
])
def test_refusals(forward: str, reason: str) -> None:
    code = model(LAYERS, forward)
    result = rewrite(code)
    assert result.text == code
    assert any(reason in r for r in reasons(result)), reasons(result)
    # Each site left is a check finding (TSF201) with the reason, never a promised fix.
    assert result.skips and {s.code for s in result.skips} == {"TSF201"}
    assert result.fixes == []


def test_an_int_default_selects_in_the_first_run_so_a_second_run_changes_nothing() -> None:
    """speechbrain's ``_combine(self, shortcut, x, block_index=0)``: annotate writes
    ``block_index: int`` in the same run; the index must be taken as an int already then, or a
    second run rewrites what the first left (the corpus test's idempotence check)."""
    from tsfix.codemods.pipeline.rewrite import rewrite_source
    from tsfix.codemods.rules.registry import select_rules

    code = model(LAYERS, """
        def forward(self, x):
            return self._combine(x, 1)

        def _combine(self, x, block_index=0):
            return self.layers[block_index](x)
        """)
    rules = select_rules(["modulelist-iter", "annotate"], "torchscript")
    first = rewrite_source(code, RewriteSettings(rules), "m.py").text
    assert "enumerate(self.layers)" in first
    assert rewrite_source(first, RewriteSettings(rules), "m.py").text == first


def test_nested_container_indexed_by_two_variables() -> None:
    result = rewrite(model("""
        (self):
            super().__init__()
            self.grid = nn.ModuleList([nn.ModuleList([nn.Linear(4, 4)]) for _ in range(2)])
        """, """
        def forward(self, x):
            for i in range(len(self.grid)):
                for j in range(1):
                    x = self.grid[i][j](x)
            return x
        """))
    assert not result.changed
    assert any("a nested container indexed by another variable" in r for r in reasons(result))


# ---- containers built by a base class ------------------------------------------------------------

BASE = """\
import torch
import torch.nn as nn


class _Base(nn.Module):
    def __init__(self, depth=3):
        super().__init__()
        self.depth = depth
        self.spp = nn.Sequential(*[nn.Linear(4, 4) for _ in range(depth)])
"""

BLOCK = """\
class Block(_Base):
    def forward(self, x):
        for k in range(1, self.depth):
            x = self.spp[k](x)
        for i in range(len(self.spp)):
            x = self.spp[i](x)
        return x
"""


def test_a_container_built_in_a_base_class_of_the_file() -> None:
    result = rewrite(BASE + "\n\n" + BLOCK)
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for k in range(1, self.depth):
                if k >= len(self.spp):
                    raise IndexError(f"index {k} is out of range")
                for j, spp_layer2 in enumerate(self.spp):
                    if j == k:
                        x = spp_layer2(x)
            for spp_layer in self.spp:
                x = spp_layer(x)
            return x
        """), reasons(result)
    assert sorted((f.line, f.class_name, f.message) for f in result.fixes) == [
        (15, "Block", "Sequential 'self.spp' indexed by 'k'"),
        (17, "Block", "Sequential 'self.spp' indexed by 'i'")]


def test_a_subclass_that_assigns_the_attribute_itself_decides_it() -> None:
    """The subclass stores a plain list of floats under the base's container name: not a
    container, so nothing to rewrite or report."""
    code = BASE + "\n\n" + BLOCK.replace(
        "    def forward", "    def __init__(self):\n        super().__init__()\n"
        "        self.spp = [1.0, 2.0, 3.0]\n\n    def forward").replace(
        "x = self.spp[k](x)", "x = x * self.spp[k]").replace(
        "x = self.spp[i](x)", "x = x * self.spp[i]")
    result = rewrite(code)
    assert result.text == code and result.skips == []


def test_a_base_class_in_another_file_of_the_tree(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text(BASE)
    block = package / "block.py"
    block.write_text("from .base import _Base\n\n\n" + BLOCK)
    result = rewrite_source(block.read_text(), RewriteSettings([ModuleListIter]), str(block))
    assert "for j, spp_layer2 in enumerate(self.spp):" in result.text, reasons(result)
    assert "for spp_layer in self.spp:" in result.text
    assert (package / "base.py").read_text() == BASE


def test_a_base_whose_source_is_not_read_is_reported(tmp_path: Path) -> None:
    """Issue 18: a list built by a base class was skipped silently. A base from outside the
    tree cannot be read: each called site is a TSF201 refusal naming the base."""
    code = textwrap.dedent("""\
        import torch.nn as nn
        from somewhere.layers import PyramidBase


        class Block(PyramidBase):
            def forward(self, x):
                for k in range(1, self.depth):
                    x = self.spp_dw[k](x) + self.scales[k]
                return x
        """)
    path = tmp_path / "block.py"
    path.write_text(code)
    result = rewrite_source(code, RewriteSettings([ModuleListIter]), str(path))
    assert result.text == code
    assert [(s.code, s.message, s.reason) for s in result.skips] == [
        ("TSF201", "'self.spp_dw' indexed by 'k'",
         "self.spp_dw[k] (line 8): self.spp_dw is not assigned in Block; it may be a module "
         "container built by its base somewhere.layers.PyramidBase, whose source is not read; "
         "not rewritten")]


# ---- ModuleDict refusals -----------------------------------------------------------------------

@pytest.mark.parametrize(("forward", "reason"), [
    ("""
     def forward(self, x, task: str):
         return self.heads[task](x) if task else x
     """, "inside a conditional expression"),
    ("""
     def forward(self, x, task: str):
         return task == "" or self.heads[task](x)
     """, "evaluated only conditionally"),
    ("""
     def forward(self, x, task: str):
         return self.heads[task].weight
     """, "used other than by calling it"),
    ("""
     def forward(self, x, a: str, b: str):
         return self.heads[a](x) + self.heads[b](x)
     """, "several variable-key ModuleDict lookups"),
    ("""
     def forward(self, x, task: str):
         if self.heads[task](x).sum() > 0:
             x = x + 1
         return x
     """, "in a compound statement's header"),
    ("""
     def forward(self, x, tasks: list):
         return self.heads[tasks.pop()](x)
     """, "the key is computed by a call"),
    ("""
     def forward(self, x):
         return self.heads[0](x)
     """, "a ModuleDict takes a string literal key only"),
])
def test_moduledict_refusals(forward: str, reason: str) -> None:
    code = model(HEADS, forward)
    result = rewrite(code)
    assert result.text == code
    assert any(reason in r for r in reasons(result)), reasons(result)
    # Each site left is a check finding (TSF201) with the reason, never a promised fix.
    assert result.skips and {s.code for s in result.skips} == {"TSF201"}
    assert result.fixes == []


def test_moduledict_without_a_torch_import_is_refused() -> None:
    result = rewrite(model(HEADS, """
        def forward(self, x, task: str):
            return self.heads[task](x)
        """, imports="from torch import nn\n"))
    assert not result.changed
    assert any("imports neither torch nor Tensor" in r for r in reasons(result))


def test_literal_indices_and_plain_lists_are_left_alone_silently() -> None:
    result = rewrite(model(LAYERS + "    self.scales = [1.0, 2.0, 3.0]\n", """
        def forward(self, x):
            x = self.layers[0](x) + self.layers[-1](x)
            for i in range(len(self.scales)):
                x = x * self.scales[i]
            return x
        """))
    assert not result.changed
    assert result.skips == []


def test_methods_forward_does_not_reach_are_not_touched() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            return x

        def debug(self, x):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            return x
        """))
    assert not result.changed


def test_helper_called_from_forward_is_rewritten() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            return self._run(x)

        def _run(self, x):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            return self._run(x)

        def _run(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
        """)


# ---- only what TorchScript compiles ------------------------------------------------------------

def test_an_ignored_helper_is_left_alone() -> None:
    """Issue 14: a @torch.jit.ignore helper called from forward() had its loop rewritten; it runs
    in Python, where indexing works. Nothing in it is a site either."""
    code = model(LAYERS, """
        def forward(self, x):
            return self._debug(x)

        @torch.jit.ignore
        def _debug(self, x):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            return self._more(x)

        def _more(self, x):
            return self.layers[x.size(0) % 3](x)
        """)
    result = rewrite(code)
    assert result.text == code
    assert result.skips == [] and result.fixes == []


def test_code_that_never_compiles_is_left_alone() -> None:
    code = model(LAYERS, """
        def forward(self, x, k: int):
            if not torch.jit.is_scripting():
                for i in range(len(self.layers)):
                    x = self.layers[i](x)
                x = self.layers[k](x)
            return x
        """)
    result = rewrite(code)
    assert result.text == code
    assert result.skips == [] and result.fixes == []


def test_an_export_method_is_rewritten() -> None:
    result = rewrite(model(LAYERS, """
        def forward(self, x):
            return x

        @torch.jit.export
        def encode(self, x):
            for i in range(len(self.layers)):
                x = self.layers[i](x)
            return x
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            return x

        @torch.jit.export
        def encode(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
        """)
    assert [(f.code, f.line, f.message) for f in result.fixes] == [
        ("TSF201", 19, "ModuleList 'self.layers' indexed by 'i'")]


# ---- unpacked elements of a list of lists ------------------------------------------------------

PAIRS = """\
(self, depth=2, dim=4):
    super().__init__()
    self.layers = nn.ModuleList([])
    for _ in range(depth):
        self.layers.append(nn.ModuleList([nn.Linear(dim, dim), nn.Linear(dim, dim)]))
    self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(depth)])
"""

UNPACKED = """\
def forward(self, x):
    for attn, ff in self.layers:
        x = attn(x) + ff(x)
    return x
"""


@pytest.mark.parametrize("layers", [
    "nn.ModuleList([nn.ModuleList([nn.Linear(dim, dim), nn.ReLU()]) for _ in range(depth)])",
    "nn.ModuleList([nn.ModuleList([nn.Linear(dim, dim), nn.ReLU()]), "
    "nn.Sequential(nn.ReLU(), nn.Linear(dim, dim))])",
    "nn.Sequential(*[nn.Sequential(*[nn.ReLU(), nn.ReLU()]) for _ in range(depth)])",
    "nn.ModuleList([nn.ModuleList([nn.ReLU(), nn.ReLU()]) if depth > 1 "
    "else nn.ModuleList([nn.Tanh(), nn.ReLU()])])",
    "nn.ModuleList()\n    self.layers.append(nn.Sequential(nn.ReLU(), nn.ReLU()))",
])
def test_unpacked_elements_of_proven_length_become_one_loop_variable(layers: str) -> None:
    init = PAIRS.replace("nn.ModuleList([])\n    for _ in range(depth):\n        "
                         "self.layers.append(nn.ModuleList([nn.Linear(dim, dim), "
                         "nn.Linear(dim, dim)]))", layers)
    assert layers in init
    result = rewrite(model(init, UNPACKED))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            for layer in self.layers:
                attn = layer[0]
                ff = layer[1]
                x = attn(x) + ff(x)
            return x
        """), reasons(result)
    assert result.skips == []
    assert [(f.code, f.message) for f in result.fixes] == [
        ("TSF216", "elements of ModuleList 'self.layers' unpacked into 'attn, ff'")
        if "self.layers = nn.Sequential" not in init else
        ("TSF216", "elements of Sequential 'self.layers' unpacked into 'attn, ff'")]
    assert result.changes[0].summary.endswith(
        "`for attn, ff in self.layers` -> one loop variable per element, its modules picked by "
        "index (attn = layer[0], ff = layer[1])")
    assert not rewrite(result.text).changed


def test_unpacked_elements_in_enumerate_and_zip_and_a_one_line_body() -> None:
    result = rewrite(model(PAIRS, """
        def forward(self, x):
            layer = x
            for index, (attn, ff) in enumerate(self.layers):
                x = attn(x) + index
            for [attn, ff], norm in zip(self.layers, self.norms): x = norm(ff(x))
            return x + layer
        """))
    assert body(result) == textwrap.dedent("""\
        def forward(self, x):
            layer = x
            for index, layer_module in enumerate(self.layers):
                attn = layer_module[0]
                ff = layer_module[1]
                x = attn(x) + index
            for layer_module, norm in zip(self.layers, self.norms):
                attn = layer_module[0]
                ff = layer_module[1]
                x = norm(ff(x))
            return x + layer
        """), reasons(result)
    assert [f.line for f in result.fixes] == [15, 17]


@pytest.mark.parametrize(("change", "forward", "reason"), [
    (("[nn.Linear(dim, dim), nn.Linear(dim, dim)]", "[nn.Linear(dim, dim)] * 2"), UNPACKED,
     "the length of each element of self.layers is not proven: an element is "
     "`nn.ModuleList([nn.Linear(dim, dim)] * 2)`, not a ModuleList or Sequential literal"),
    (("nn.ModuleList([nn.Linear(dim, dim), nn.Linear(dim, dim)])", "make_pair(dim)"), UNPACKED,
     "the length of each element of self.layers is not proven: an element is "
     "`make_pair(dim)`, not a ModuleList or Sequential literal"),
    (("nn.Linear(dim, dim), nn.Linear(dim, dim)]", "nn.Linear(dim, dim)]"), UNPACKED,
     "the elements of self.layers have 1 modules, the target unpacks 2"),
    (("self.norms =", "self.layers.extend([nn.ModuleList()])\n    self.norms ="), UNPACKED,
     "the length of each element of self.layers is not proven: "
     "`self.layers.extend([nn.ModuleList()])` in __init__()"),
    (("self.norms =", "self.layers[0] = nn.ModuleList()\n    self.norms ="), UNPACKED,
     "the length of each element of self.layers is not proven: an entry of self.layers is "
     "assigned in __init__()"),
    (("self.norms =", "self.layers[0].append(nn.ReLU())\n    self.norms ="), UNPACKED,
     "the length of each element of self.layers is not proven: an element of self.layers is "
     "changed in __init__()"),
    (("self.layers = nn.ModuleList([])", "self.layers = nn.ModuleList(make_layers())"),
     UNPACKED, "the length of each element of self.layers is not proven: its elements come "
     "from `nn.ModuleList(make_layers())`"),
    # A scripted ModuleList drops None entries: `layer[1]` would pick another module.
    (("[nn.Linear(dim, dim), nn.Linear(dim, dim)]",
      "[nn.Linear(dim, dim) if depth > 1 else None, nn.Linear(dim, dim)]"), UNPACKED,
     "the length of each element of self.layers is not proven: an element holds "
     "`nn.Linear(dim, dim) if depth > 1 else None`, which may be None, and a scripted "
     "ModuleList drops its None entries"),
    (("[nn.Linear(dim, dim), nn.Linear(dim, dim)]", "[None, nn.Linear(dim, dim)]"), UNPACKED,
     "the length of each element of self.layers is not proven: an element holds `None`, which "
     "may be None, and a scripted ModuleList drops its None entries"),
    (None, UNPACKED.replace("attn, ff", "attn, *rest").replace("ff(x)", "rest[0](x)"),
     "'attn, *rest' is not a tuple of plain names (a starred or nested part has no "
     "literal-index equivalent)"),
])
def test_unpacked_elements_refused(change: tuple[str, str] | None, forward: str,
                                   reason: str) -> None:
    init = PAIRS if change is None else PAIRS.replace(*change)
    assert change is None or init != PAIRS
    code = model(init, forward)
    result = rewrite(code)
    assert result.text == code
    target = "attn, *rest" if change is None else "attn, ff"
    line = code.splitlines().index(f"        for {target} in self.layers:") + 1
    assert [(s.code, s.message, s.reason) for s in result.skips] == [
        ("TSF216", f"elements of ModuleList 'self.layers' unpacked into '{target}'",
         f"`for {target} in self.layers` (line {line}): {reason}; not rewritten")]


def test_unpacked_elements_grown_in_another_method_are_refused() -> None:
    code = model(PAIRS, UNPACKED + "\ndef grow(self):\n    self.layers.append(nn.ReLU())\n")
    result = rewrite(code)
    assert result.text == code
    assert reasons(result) == [
        "`for attn, ff in self.layers` (line 13): the length of each element of self.layers is "
        "not proven: `self.layers.append(nn.ReLU())` in grow(); not rewritten"]


def test_unpacked_elements_of_a_list_a_base_class_builds_are_refused() -> None:
    code = textwrap.dedent("""\
        import torch.nn as nn


        class Base(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([nn.ModuleList([nn.ReLU(), nn.ReLU()])])


        class Block(Base):
            def forward(self, x):
                for attn, ff in self.layers:
                    x = ff(attn(x))
                return x
        """)
    result = rewrite(code)
    assert result.text == code
    assert [(s.class_name, s.reason) for s in result.skips] == [
        ("Block", "`for attn, ff in self.layers` (line 12): the length of each element of "
         "self.layers is not proven: self.layers is built by a base class; not rewritten")]


def test_tuples_over_other_iterables_are_left_alone_silently() -> None:
    code = model(PAIRS + "    self.pairs = [(1, 2), (3, 4)]\n", """
        def forward(self, x):
            for a, b in self.pairs:
                x = x * a + b
            for k, v in zip(self.pairs, self.pairs):
                x = x + 1
            return x
        """)
    result = rewrite(code)
    assert result.text == code and result.skips == [] and result.fixes == []


# ---- what tsfix check reports -------------------------------------------------------------------

def test_offset_index_is_fixed_and_reported() -> None:
    """Issue 14 had check promise modulelist-iter for `self.blocks[i - 1]`, which the rule then
    refused; issue 18: the rule fixes it (the enumerate+if form) and reports both sites fixed."""
    code = textwrap.dedent("""\
        import torch.nn as nn


        class Stack(nn.Module):
            def __init__(self, n=3):
                super().__init__()
                self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])

            def forward(self, x):
                for i in range(1, len(self.blocks)):
                    x = self.blocks[i - 1](x) + self.blocks[i](x)
                return x
        """)
    result = rewrite(code)
    assert result.skips == []
    assert [(f.code, f.line, f.column, f.message) for f in result.fixes] == [
        ("TSF201", 11, 17, "ModuleList 'self.blocks' indexed by 'i - 1'"),
        ("TSF201", 11, 41, "ModuleList 'self.blocks' indexed by 'i'")]
    assert "x = block(x) + block_module(x)" in result.text


def test_reversed_outside_a_loop_header_and_a_reassigned_container_are_refused() -> None:
    code = model(LAYERS, """
        def forward(self, x, k: int):
            outs = [layer(x) for layer in reversed(self.layers)]
            return self.extra[k](x)

        def reset(self):
            self.extra = nn.ModuleList()
        """).replace("self.other =", "self.extra = nn.ModuleList()\n        self.other =")
    result = rewrite(code)
    assert result.text == code and result.fixes == []
    assert [(s.code, s.message, s.reason) for s in result.skips] == [
        ("TSF201", "ModuleList 'self.extra' indexed by 'k'",
         "self.extra[k] (line 16): self.extra is also assigned in reset(); not rewritten"),
        ("TSF202", "reversed(self.layers)",
         "reversed(self.layers) (line 15) is not the iterable of a `for` loop with one target "
         "variable, the only form the rule rewrites; not rewritten")]


def test_blockers_fixture_findings() -> None:
    """fixtures/check/blockers.py: one finding of each of the rule's codes per class marked with
    it, both fixed."""
    found = rewrite_source(
        BLOCKERS.read_text(), RewriteSettings([ModuleListIter], output=False), "blockers.py"
    )
    assert [(f.class_name, f.code, f.line, f.column, f.message) for f in found.fixes] == [
        ("IndexedByVariable", "TSF201", 160, 17, "ModuleList 'self.layers' indexed by 'i'"),
        ("ReversedLayers", "TSF202", 170, 22, "reversed(self.layers)"),
        ("UnpackedLayerPairs", "TSF216", 385, 13,
         "elements of ModuleList 'self.layers' unpacked into 'proj, act'")]
    assert found.skips == []


# ---- fixtures ----------------------------------------------------------------------------------

def test_fixtures_rewrite_exactly_these_classes() -> None:
    rewritten: set[str] = set()
    for before, _ in fixture_pairs(FIXTURES):
        result = rewrite_source(before.read_text(), RewriteSettings([ModuleListIter]), before.name)
        rewritten |= {c.class_name for c in result.changes}
    assert rewritten == {"TransformerEncoder", "JumpingKnowledgeReadout", "UNet",
                         "MultiTaskModel", "AllTasksModel", "MultiScaleBackbone",
                         "EarlyExitClassifier", "ProgressiveGenerator", "CascadeRefiner",
                         "ExpertSelector", "TaskHeads", "PyramidDecoder", "UBlock",
                         "UConvBlock", "Res2NetBlock", "RNNCell", "MultiScaleDiscriminator",
                         "Transformer", "MergingTransformer", "GatedStack", "HybridNet",
                         "StageSelector"}


def test_kept_loops_fixture_reports_every_refusal() -> None:
    result = rewrite_source(
        (FIXTURES / "kept_loops.in.py").read_text(),
        RewriteSettings([ModuleListIter]),
        "kept_loops.in.py",
    )
    assert not result.changed
    by_class: dict[str, list[str]] = {}
    for s in result.skips:
        assert s.code == "TSF201", s
        by_class.setdefault(s.class_name, []).append(s.reason)
    assert by_class == {
        "RepeatedBlocks": [
            "self.TCN[i] (line 39) is indexed with a computed value, not the counter of a loop "
            "over the whole list; the enumerate+if form does not apply: `tcn_out` is unpacked "
            "later (`residual, skip = tcn_out`), so the call's result is no single Tensor; "
            "not rewritten"],
        "RefinedUntilDone": [
            "`for i in range(len(self.layers))` (line 54) has an `else` clause, which "
            "TorchScript does not support either; not rewritten"],
        "HeadOutputs": [
            "self.heads[i] (line 70) is indexed with a computed value, not the counter of a "
            "loop over the whole list; the enumerate+if form does not apply: self.heads[i] is "
            "inside a lambda or comprehension; not rewritten"],
        "TiedProjection": [
            "self.layers[k] (line 81) is indexed with a computed value, not the counter of a "
            "loop over the whole list; the enumerate+if form does not apply: self.layers[k] is "
            "used other than by calling it; not rewritten"]}


@pytest.mark.slow
def test_original_checkpoint_loads_strictly_into_the_rewrite() -> None:
    """The rewrite keeps parameter names: a state_dict saved from the original loads with
    strict=True, and a renamed attribute would not (so the check can fail)."""
    torch = pytest.importorskip("torch")
    original = load_module(FIXTURES / "encoder_stack.in.py", "_mli_encoder_in")
    rewritten = load_module(FIXTURES / "encoder_stack.out.py", "_mli_encoder_out")
    torch.manual_seed(0)
    before = original.TransformerEncoder().eval()
    after = rewritten.TransformerEncoder().eval()
    assert set(before.state_dict()) == set(after.state_dict())
    after.load_state_dict(before.state_dict(), strict=True)
    x = torch.randn(2, 16, 32)
    with torch.no_grad():
        assert torch.allclose(torch.jit.script(after)(x), before(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(Exception, match="integer literal"):
        torch.jit.script(before)
    renamed = rewritten.TransformerEncoder().eval()
    renamed.blocks = renamed.layers
    del renamed.layers
    with pytest.raises(RuntimeError, match="Missing key"):
        renamed.load_state_dict(before.state_dict())


@pytest.mark.slow
def test_one_artifact_serves_every_task_name(tmp_path: Path) -> None:
    """The ModuleDict rewrite: one scripted artifact serves every task name (validation's
    one-artifact step called it with each)."""
    folder = copy_fixture(tmp_path, "modulelist-iter")
    done = apply_with_report(folder, "modulelist-iter", target=folder / "multitask.in.py",
                             workdir=folder)
    assert done.returncode == 0, done.stderr
    classes = {c["class_name"]: c for c in done.classes}
    assert "one artifact served 3 of 3" in classes["MultiTaskModel"]["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(ModuleListIter.INVALID)))
def test_embedded_examples_script_only_after_the_rewrite(index: int, tmp_path: Path) -> None:
    """The documented 'before' fails torch.jit.script and the 'after' compiles."""
    torch = pytest.importorskip("torch")
    example = ModuleListIter.INVALID[index]
    assert example.after is not None
    compiled = []
    for label, code in (("before", example.before), ("after", example.after)):
        path = tmp_path / f"example_{label}.py"
        path.write_text(code)
        module = load_module(path, f"_mli_example_{index}_{label}")
        try:
            torch.jit.script(module.M())
            compiled.append(label)
        except Exception as exc:
            assert any(word in str(exc) for word in ("literal", "reversed", "tuple")), exc
    assert compiled == ["after"]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "init", "kwargs"), [
    ("ExpertSelector", {}, {"expert": -1}),
    ("ExpertSelector", {}, {"expert": -4}),
    ("ExpertSelector", {}, {"expert": 4}),
    ("ExpertSelector", {}, {"expert": -5}),
    ("TaskHeads", {}, {"task_id": 3}),
    ("ProgressiveGenerator", {"active_stages": 5}, {}),
    ("ProgressiveGenerator", {"active_stages": 1}, {}),
])
def test_selected_elements_match_the_list_also_out_of_range(
        name: str, init: dict[str, int], kwargs: dict[str, int]) -> None:
    """The enumerate+if form picks what indexing picked, from the end too, and an index out of
    range raises the list's own IndexError, eagerly and from the scripted artifact."""
    torch = pytest.importorskip("torch")
    original = load_module(FIXTURES / "index_select.in.py", "_mli_select_in")
    rewritten = load_module(FIXTURES / "index_select.out.py", "_mli_select_out")
    torch.manual_seed(0)
    before = getattr(original, name)(**init).eval()
    after = getattr(rewritten, name)(**init).eval()
    after.load_state_dict(before.state_dict())
    scripted = torch.jit.script(after)
    x = torch.randn(2, 16)
    try:
        expected = before(x, **kwargs)
    except IndexError as exc:
        message = str(exc)
        assert "out of range" in message
        with pytest.raises(IndexError, match=f"^{message}$"):
            after(x, **kwargs)
        with pytest.raises(torch.jit.Error, match=f"IndexError: {message}"):
            scripted(x, **kwargs)
        return
    with torch.no_grad():
        assert torch.equal(after(x, **kwargs), expected)
        assert torch.allclose(scripted(x, **kwargs), expected, rtol=1e-5, atol=1e-6)
