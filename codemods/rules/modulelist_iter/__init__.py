"""``modulelist-iter``: ModuleList / Sequential / ModuleDict indexing becomes iteration.

What it does
    Finds loops in the methods TorchScript compiles (``forward()``, ``@torch.jit.export``
    methods, and the methods they call; never a ``@torch.jit.ignore``/``unused`` method or code
    under ``if not torch.jit.is_scripting():``) that index a ``nn.ModuleList`` or
    ``nn.Sequential`` attribute with the loop variable, and iterates the container instead::

        for i in range(len(self.layers)):        ->  for layer in self.layers:
            x = self.layers[i](x)                        x = layer(x)

    The range may be ``range(len(self.layers))``, ``range(self.num_layers)`` or ``range(n)`` when
    ``n`` provably equals the list's length (both come from the same constructor argument,
    ``len(...)`` of the same list, or the same literal count). Several containers indexed by the
    same variable are zipped (``zip(self.convs, self.norms)``); when the index is also used for
    something else (``hidden[i]``), it is kept with ``enumerate``. Reverse traversal
    (``reversed(range(len(self.ups)))``, ``range(len(self.ups) - 1, -1, -1)``,
    ``reversed(self.ups)``) iterates the reversed slice ``self.ups[::-1]`` and calls its elements
    through ``.forward(...)``; a kept index is recomputed as ``len(self.ups) - 1 - i_rev``.
    ``for i, layer in enumerate(self.layers)`` loops that index another list with ``i`` zip it
    in, and ``for name in self.heads`` loops over a ``nn.ModuleDict`` that index it with ``name``
    iterate ``.items()`` (or ``.values()``).
    A ``nn.ModuleDict`` called with a variable key (``self.heads[task](x)``) becomes a loop over
    ``.items()`` that compares the name, with the result initialised before the loop and
    ``KeyError(task)`` (what the dict itself raises) when no name matched::

        head_out: Optional[torch.Tensor] = None
        for name, head in self.heads.items():
            if name == task:
                head_out = head(x)
        if head_out is None:
            raise KeyError(task)
        return head_out

    A ModuleList or Sequential element picked by an index that no iteration replaces (an
    offset ``self.blocks[i - 1]``, a partial range ``for k in range(1, self.depth)``, a list of
    another length indexed by the same counter, a list a base class builds, an ``int``
    argument) is picked by the enumerate+if form instead: the statement holding the call moves
    into a loop over ``enumerate(self.blocks)`` under ``if j == <index>:``, where only the
    matching element runs. The statement keeps its place and the loop around it stays as it is
    (``break`` and ``continue`` in it are fine)::

        for i in range(1, len(self.blocks)):     ->  for i in range(1, len(self.blocks)):
            x = x + self.blocks[i - 1](x)                for j, block in enumerate(self.blocks):
                                                             if j == i - 1:
                                                                 x = x + block(x)

    An index that may be out of range is checked first, raising what the list itself raises
    (``IndexError("index 5 is out of range")``); an index that may be negative also matches
    ``j == index + len(self.blocks)``, counting from the end as the list does. An index is known
    to be in range from the loop that counts it, or from the ``if`` tests around the statement
    (``if i < len(self.blocks):``; ``if i >= offset:`` for ``i - offset``). A statement that
    binds a name for the first time (``out_k = self.spp_dw[k](output[-1])``, SuDORMRF's UBlock)
    gets the call's result first, typed as a Tensor, since TorchScript needs a name bound on
    every path before it is read::

        if k >= len(self.spp_dw):
            raise IndexError(f"index {k} is out of range")
        out_k: Optional[torch.Tensor] = None
        for j, spp_dw_layer in enumerate(self.spp_dw):
            if j == k:
                out_k = spp_dw_layer(output[-1])
        assert out_k is not None

    An element bound to a name (``tenc = self.time_encoder[idx]``, torchaudio's HDemucs) is
    selected with the statements that use it: those after the binding, up to the last that
    reads the name, move under ``if j == idx:`` in a loop whose variable takes the name, so
    its calls and attribute reads (``tenc.empty``) stay as written::

        if idx < len(self.time_encoder):     ->  if idx < len(self.time_encoder):
            tenc = self.time_encoder[idx]            for j, tenc in enumerate(self.time_encoder):
            xt = tenc(xt)                                if j == idx:
            if not tenc.empty:                               xt = tenc(xt)
                saved_t.append(xt)                           if not tenc.empty:
                                                                 saved_t.append(xt)

    A ``return self.experts[k](x)`` returns from inside the loop and raises the list's
    ``IndexError`` after it. Iteration stays the rewrite wherever its proof holds; a loop may
    mix both (``for i, conv in enumerate(self.convs)`` with ``self.skips[i]`` selected when
    ``self.skips`` has another length).

    A loop that unpacks the elements of a ModuleList of ModuleLists (vit-pytorch's
    ``for attn, ff in self.layers:``, also ``for i, (attn, ff) in enumerate(self.layers)`` and
    ``zip``) binds one loop variable per element and picks its modules by literal index::

        for attn, ff in self.layers:             ->  for layer in self.layers:
            x = attn(x) + x                              attn = layer[0]
                                                         ff = layer[1]
                                                         x = attn(x) + x

    Every element must provably hold as many modules as the target names: each is a
    ``nn.ModuleList([...])`` or ``nn.Sequential(...)`` literal of that length, given to the
    constructor (a list or a comprehension) or appended in ``__init__``, and nothing else adds
    to the list or its elements, and no entry of an element is or may be ``None``
    (``nn.Linear(d, d) if last else None``: a scripted ModuleList drops None entries, so the
    indexes would shift). Otherwise the loop is refused with the reason (an element built by a
    helper, a length that differs, an entry that may be None, a list a base class builds, a
    starred or nested target part).

    Containers are recognised from their assignment in ``__init__`` (``nn.ModuleList(...)``,
    ``torch.nn.Sequential(*[...])``, ``ModuleDict`` imported from ``torch.nn``, or an empty
    ``nn.ModuleList()`` filled by ``append`` in one ``for`` loop), in this class or in a base
    class defined in the same file or in another file of the user's tree (read, not imported).
    An attribute a class never assigns, called as ``self.x[k](...)`` while a base's source cannot
    be read (an installed package's class), is reported (``TSF201``, with the base named), not
    rewritten. Loop variables are named after the attribute (``self.layers`` -> ``layer``,
    ``self.downs`` -> ``down``, ``self.body`` -> ``body_layer``) and never shadow a name the
    method already uses; a module-typed loop variable is never bound again in a nested block
    (TorchScript rejects that).

Why it breaks export
    TorchScript compiles a loop over a module container by unrolling it, one copy of the body per
    submodule, so it only indexes a ModuleList or Sequential with an integer literal:
    ``self.layers[i]`` fails ("Expected integer literal for index") even inside
    ``for i in range(3)``, and a ModuleDict only takes a string literal key. Iterating the
    container (``for``, ``zip``, ``enumerate``, ``.items()``) is supported. Neither
    ``reversed(self.layers)`` nor ``zip`` with a ``range()`` scripts; a slice does, but its
    elements must be called through ``.forward``. A module cannot be unpacked ("module cannot
    be used as a tuple"), but an element of a ModuleList loop variable can be indexed with a
    literal (``layer[0]``).

Example
    Before::

        for i in range(len(self.layers)):
            x = self.norms[i](x + self.layers[i](x))
            hidden.append(x * self.scales[i])

    After::

        for i, (layer, norm) in enumerate(zip(self.layers, self.norms)):
            x = norm(x + layer(x))
            hidden.append(x * self.scales[i])

Fix safety
    Parameter names are unchanged (the modules are not moved), so existing checkpoints load
    strictly. Iteration visits exactly the entries the index visited: the range must provably
    cover every entry of each indexed container (same length source in ``__init__``), and the
    loop must have no ``break``/``continue`` (TorchScript cannot unroll them) and not reassign its
    variable. Otherwise the enumerate+if form runs the same calls on the same elements in the
    same order. It needs an index that is an int and reads the same each time (a loop
    counter, a parameter annotated ``int`` or with an int literal default, an attribute
    ``__init__`` sets to an int for certain (a literal, ``len()``, ``int()``, such a
    parameter), ``len(...)``, and ``+ - * // %`` of those). An int default counts like the
    annotation TorchScript and ``annotate`` give it (trusting one and not the other made a
    second run rewrite what the first left); neither is enforced in eager mode, so a caller
    passing a float gets a skipped selection where the list raised ``TypeError``. An index out
    of range raises the list's own ``IndexError`` with the same message, before the statement
    runs (so parts of the statement left of the call, which the original evaluated first, are
    not evaluated then). Where the call's result is bound first (the result form), nothing else in
    the statement may be called before it (moving the call ahead would reorder calls), its
    result is taken to be a Tensor (a result unpacked later is refused), and a selected module
    that returns None raises ``AssertionError`` instead of binding None. A statement calling two
    selected elements nests one loop in the other (TorchScript compiles n x m copies of it).
    Statements moved with an element bound to a name run once, on the element indexing
    picked, in the same order: the name is bound nowhere else and only called or its attributes
    read; they hold no ``return`` (it would make the method's result Optional to TorchScript),
    ``yield``, or ``break``/``continue`` of an enclosing loop; they rebind no name the index
    reads; and a name they bind that is read outside them is bound on every path before them
    (TorchScript needs it bound where no element matched). Otherwise the site is refused with
    the reason.
    Unpacked elements are picked by index only when every element's length is proven, so
    ``layer[k]`` is the module the unpacking bound (the original raises ``ValueError`` on any
    other length).
    Not rewritten, with the reason reported: ``for ... else`` (TorchScript rejects it anyway),
    nested containers indexed by two variables, elements used other than by a call (or bound
    to a name used so), a call
    inside a lambda, comprehension, conditional expression or the right side of ``and``/``or``,
    in a compound statement's header or on a line shared with other statements, and a first
    binding whose statement calls two selected elements.
    Every site is reported: ``TSF201`` (a container indexed by a variable), ``TSF202``
    (``reversed()`` of a container) and ``TSF216`` (elements of a module list unpacked) are
    either fixed by the rewrite or refused with the reason,
    which ``tsfix check`` shows instead of promising a fix.
    Reversed slices call elements through ``.forward(...)``, which skips forward hooks registered
    on those submodules in eager mode (TorchScript never runs hooks on them); each such rewrite
    says so in its notes. The ModuleDict rewrite assumes the selected module returns a Tensor
    (``Optional[torch.Tensor]``); if it returns something else, re-script fails and validation
    rejects the rewrite rather than writing it. A missing key still raises ``KeyError(key)``,
    after evaluating nothing.
"""

from __future__ import annotations

import ast

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import find_all, self_attr, self_name
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule
from tsfix.codemods.rules.modulelist_iter._analysis import MethodAnalysis
from tsfix.codemods.rules.modulelist_iter._common import (
    MethodPlan,
    element_name,
    is_literal_key,
    single_index,
)
from tsfix.codemods.rules.modulelist_iter._inherited import BaseContainers, base_containers
from tsfix.codemods.rules.modulelist_iter._lengths import ClassAnalysis
from tsfix.codemods.rules.modulelist_iter._rewrite import MethodRewriter

__all__ = ["ModuleListIter", "element_name"]


class ModuleListIter(Rule):
    __doc__ = __doc__
    name = "modulelist-iter"
    # --rule all order: first: it restructures loops, which the others then read as written.
    order = 10
    targets = ("torchscript", "onnx")      # torch.export does not need this fix
    CODES = (
        Code("TSF201", "modulelist-index", "ModuleList/Sequential/ModuleDict indexed by a variable",
             "TorchScript indexes a module container with a literal only (\"Expected integer "
             "literal for index\"), even inside `for i in range(n)`; iterate it instead."),
        Code("TSF202", "modulelist-reversed", "reversed() of a module container",
             "reversed(self.layers) does not script; iterate the reversed slice and call "
             "`.forward`."),
        Code("TSF216", "modulelist-unpack", "elements of a module list unpacked in a for loop",
             "TorchScript cannot unpack a module (\"module cannot be used as a tuple\"): "
             "`for attn, ff in self.layers` over a ModuleList of ModuleLists fails; bind one "
             "loop variable and pick `layer[0]`, `layer[1]` in the body."),
    )
    summary = ("Indexing a ModuleList/Sequential/ModuleDict with a variable becomes iteration "
               "over the container; parameter names are unchanged.")

    VALID = (
        # for ... else: TorchScript rejects the loop whatever its body does.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
    def forward(self, x):
        for i in range(len(self.layers)):
            x = self.layers[i](x)
        else:
            x = x + 1
        return x
""",
        # The element is used other than by calling it.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
    def forward(self, x, k: int):
        return x @ self.layers[k].weight
""",
        # The result of a first binding is unpacked: it is no single Tensor.
        """
import torch
import torch.nn as nn
class M(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.cells = nn.ModuleList([nn.LSTMCell(4, 4) for _ in range(n)])
    def forward(self, x, h, c):
        for i in range(1, len(self.cells)):
            state = self.cells[i](x, (h, c))
            h, c = state
        return h
""",
        # Unpacked elements whose length is not proven: each is built by a helper.
        """
import torch.nn as nn
def block(dim):
    return nn.ModuleList([nn.Linear(dim, dim), nn.Linear(dim, dim)])
class M(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.layers = nn.ModuleList([block(4) for _ in range(depth)])
    def forward(self, x):
        for attn, ff in self.layers:
            x = ff(attn(x))
        return x
""",
        # An index that is not provably an int.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
    def forward(self, x, k):
        return self.experts[k](x)
""",
    )
    INVALID = (
        # The plain loop; the range is the constructor argument the list was built from.
        Example(
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, num_layers=3):
        super().__init__()
        self.num_layers = num_layers
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(num_layers)])
    def forward(self, x):
        for i in range(self.num_layers):
            x = self.layers[i](x)
        return x
""",
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, num_layers=3):
        super().__init__()
        self.num_layers = num_layers
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(num_layers)])
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
""",
        ),
        # Two lists indexed by the same variable, which also indexes a list of tensors.
        Example(
            """
from typing import List
from torch import Tensor, nn
class M(nn.Module):
    def __init__(self, dims=(4, 4, 4)):
        super().__init__()
        self.convs = nn.ModuleList([nn.Linear(d, d) for d in dims])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for d in dims])
    def forward(self, x, hidden: List[Tensor]):
        for i in range(len(self.convs)):
            x = self.norms[i](self.convs[i](x)) + hidden[i]
        return x
""",
            """
from typing import List
from torch import Tensor, nn
class M(nn.Module):
    def __init__(self, dims=(4, 4, 4)):
        super().__init__()
        self.convs = nn.ModuleList([nn.Linear(d, d) for d in dims])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for d in dims])
    def forward(self, x, hidden: List[Tensor]):
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            x = norm(conv(x)) + hidden[i]
        return x
""",
        ),
        # Reverse traversal: a reversed slice, elements called through .forward.
        Example(
            """
from typing import List
import torch
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.ups = nn.ModuleList()
        for _ in range(3):
            self.ups.append(nn.Linear(4, 4))
    def forward(self, x, skips: List[torch.Tensor]):
        for i in reversed(range(len(self.ups))):
            x = self.ups[i](x) + skips[i]
        return x
""",
            """
from typing import List
import torch
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.ups = nn.ModuleList()
        for _ in range(3):
            self.ups.append(nn.Linear(4, 4))
    def forward(self, x, skips: List[torch.Tensor]):
        for i_rev, up in enumerate(self.ups[::-1]):
            i = len(self.ups) - 1 - i_rev
            x = up.forward(x) + skips[i]
        return x
""",
        ),
        # reversed() of the list itself, and a Sequential indexed in a loop.
        Example(
            """
import torch
class M(torch.nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.blocks = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(depth)])
    def forward(self, x):
        for i in range(len(self.blocks)):
            x = self.blocks[i](x)
        for block in reversed(self.blocks):
            x = block(x)
        return x
""",
            """
import torch
class M(torch.nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.blocks = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(depth)])
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        for block in self.blocks[::-1]:
            x = block.forward(x)
        return x
""",
        ),
        # Elements unpacked (vit-pytorch's Transformer): one loop variable, modules by index.
        Example(
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]))
    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return x
""",
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]))
    def forward(self, x):
        for layer in self.layers:
            attn = layer[0]
            ff = layer[1]
            x = attn(x) + x
            x = ff(x) + x
        return x
""",
        ),
        # An offset index: the element is matched in a loop over the list (the index is
        # provably in range, so no check).
        Example(
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
    def forward(self, x):
        for i in range(1, len(self.blocks)):
            x = x + self.blocks[i - 1](x)
        return x
""",
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
    def forward(self, x):
        for i in range(1, len(self.blocks)):
            for j, block in enumerate(self.blocks):
                if j == i - 1:
                    x = x + block(x)
        return x
""",
        ),
        # A partial range over a list a base class builds (SuDORMRF's UBlock): the first binding
        # of out_k gets the result, the list's IndexError is checked first.
        Example(
            """
import torch
import torch.nn as nn
class Base(nn.Module):
    def __init__(self, depth=3):
        super().__init__()
        self.depth = depth
        self.spp = nn.ModuleList()
        for _ in range(depth):
            self.spp.append(nn.Linear(4, 4))
class M(Base):
    def forward(self, x):
        output = [self.spp[0](x)]
        for k in range(1, self.depth):
            out_k = self.spp[k](output[-1])
            output.append(out_k)
        return output[-1]
""",
            """
from typing import Optional

import torch
import torch.nn as nn
class Base(nn.Module):
    def __init__(self, depth=3):
        super().__init__()
        self.depth = depth
        self.spp = nn.ModuleList()
        for _ in range(depth):
            self.spp.append(nn.Linear(4, 4))
class M(Base):
    def forward(self, x):
        output = [self.spp[0](x)]
        for k in range(1, self.depth):
            if k >= len(self.spp):
                raise IndexError(f"index {k} is out of range")
            out_k: Optional[torch.Tensor] = None
            for j, spp_layer in enumerate(self.spp):
                if j == k:
                    out_k = spp_layer(output[-1])
            assert out_k is not None
            output.append(out_k)
        return output[-1]
""",
        ),
        # An int argument: returned from inside the loop; negative indexes count from the end.
        Example(
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
    def forward(self, x, k: int = 0):
        return self.experts[k](x)
""",
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
    def forward(self, x, k: int = 0):
        for j, expert in enumerate(self.experts):
            if j == k or j == k + len(self.experts):
                return expert(x)
        raise IndexError(f"index {k} is out of range")
""",
        ),
        # An element bound to a name (torchaudio's HDemucs): the statements using it move into
        # the loop; the if around them proves the index in range.
        Example(
            """
import torch.nn as nn
class Block(nn.Module):
    def __init__(self, gated=False):
        super().__init__()
        self.gated = gated
        self.lin = nn.Linear(4, 4)
    def forward(self, x):
        return self.lin(x)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(3)])
        self.side = nn.ModuleList([Block(), Block(True)])
    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.side):
                side = self.side[i]
                x = side(x)
                if side.gated:
                    x = x.sigmoid() * x
        return x
""",
            """
import torch.nn as nn
class Block(nn.Module):
    def __init__(self, gated=False):
        super().__init__()
        self.gated = gated
        self.lin = nn.Linear(4, 4)
    def forward(self, x):
        return self.lin(x)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(3)])
        self.side = nn.ModuleList([Block(), Block(True)])
    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.side):
                for j, side in enumerate(self.side):
                    if j == i:
                        x = side(x)
                        if side.gated:
                            x = x.sigmoid() * x
        return x
""",
        ),
        # A ModuleDict chosen by a string argument.
        Example(
            """
import torch
from torch.nn import Linear, ModuleDict, Module
class M(Module):
    def __init__(self):
        super().__init__()
        self.heads = ModuleDict({"cls": Linear(4, 2), "reg": Linear(4, 1)})
    def forward(self, x, task: str):
        return self.heads[task](x)
""",
            """
from typing import Optional

import torch
from torch.nn import Linear, ModuleDict, Module
class M(Module):
    def __init__(self):
        super().__init__()
        self.heads = ModuleDict({"cls": Linear(4, 2), "reg": Linear(4, 1)})
    def forward(self, x, task: str):
        head_out: Optional[torch.Tensor] = None
        for name, head in self.heads.items():
            if name == task:
                head_out = head(x)
        if head_out is None:
            raise KeyError(task)
        return head_out
""",
        ),
    )


    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        """Something modulelist-iter looks at: in a compiled method, an attribute of self
        indexed by anything but an int or string literal (an int literal too when the file
        names ModuleDict, whose keys are strings), a call of ``reversed``, or a loop unpacking
        what an attribute of self yields."""
        int_keys_ok = "ModuleDict" not in file.text
        for _, func in file.compiled:
            self_var = file.self_var(func)
            for node in file.nodes_of(func):
                if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                        and isinstance(node.value.value, ast.Name)
                        and node.value.value.id == self_var
                        and not _literal(node.slice, int_keys_ok)):
                    return True
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "reversed"):
                    return True
                if (isinstance(node, ast.For) and isinstance(node.target, ast.Tuple | ast.List)
                        and any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                                and n.value.id == self_var for n in _iterated(node.iter))):
                    return True
        return False

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        facts = self.facts
        if not facts.is_module_class(cls) or not isinstance(cls.body, cst.IndentedBlock):
            return cls
        class_facts = self.class_facts(cls)
        bases = BaseContainers()
        if _indexes_unassigned(class_facts):
            bases = base_containers(self.source_module, cls, self.context.filename)
        if not class_facts.containers and not bases.kinds and not bases.unresolved:
            return cls
        analysis = ClassAnalysis(class_facts, facts.imports, _tensor_name(facts.imports),
                                 bases.kinds, bases.unresolved)
        plans: dict[str, MethodPlan] = {}
        for name in class_facts.compiled:
            if self_name(class_facts.methods[name]) is None:
                continue
            plan = MethodAnalysis(self, analysis, name).analyse()
            if plan.loops or plan.hoists or plan.selects or plan.unpacks or plan.regions:
                plans[name] = plan
        if not plans:
            return cls
        parts: list[str] = []
        notes: list[str] = []
        body: list[cst.BaseStatement] = []
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value in plans:
                plan = plans[statement.name.value]
                self_var = self_name(statement) or "self"
                for loop in sorted(plan.loops.values(), key=lambda p: p.line):
                    parts.append(f"line {loop.line}: `{loop.old_header}` -> "
                                 f"`for {loop.header_target} in {loop.header_iter}`")
                    if loop.reverse_attrs:
                        views = ", ".join(f"{self_var}.{a}[::-1]" for a in loop.reverse_attrs)
                        notes.append(f"line {loop.line}: elements of {views} are called through "
                                     ".forward(...), which skips their forward hooks and "
                                     "pre-hooks in eager mode")
                for unpack in sorted(plan.unpacks.values(), key=lambda p: p.line):
                    parts.append(f"line {unpack.line}: `{unpack.old_header}` -> one loop "
                                 "variable per element, its modules picked by index ("
                                 + ", ".join(unpack.prelude) + ")")
                for select in sorted(plan.selects.values(), key=lambda p: p.line):
                    lists = list(dict.fromkeys(s.attr for s in select.selections))
                    parts.append(f"line {select.line}: " + ", ".join(
                        f"`{self_var}.{s.attr}[{s.index}]`" for s in select.selections)
                        + " -> the element matched in a loop over " + ", ".join(
                            f"enumerate({self_var}.{a})" for a in lists))
                    if select.form == "result":
                        self.need_typing("Optional")
                        notes.append(f"line {select.line}: the selected module's result is "
                                     f"taken to be a Tensor ({select.result}: "
                                     f"Optional[{select.tensor}], asserted not None after the "
                                     "loop)")
                for region in sorted(plan.regions.values(), key=lambda p: p.line):
                    chosen = region.selection
                    parts.append(f"line {region.line}: `{chosen.element} = {self_var}."
                                 f"{chosen.attr}[{chosen.index}]` and the {region.moved} "
                                 "statement(s) using it -> the element matched in a loop over "
                                 f"enumerate({self_var}.{chosen.attr})")
                for hoist in sorted(plan.hoists.values(), key=lambda p: p.line):
                    parts.append(f"line {hoist.line}: `{self_var}.{hoist.attr}[{hoist.key}]` -> "
                                 f"a loop over {self_var}.{hoist.attr}.items() matching the name")
                    self.need_typing("Optional")
                for node, code, message in plan.fixed:
                    self.fixed(node, code, message)
                rewritten = statement.visit(MethodRewriter(self_var, plan))
                assert isinstance(rewritten, cst.FunctionDef)
                statement = rewritten
            body.append(statement)
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(parts), notes=notes))
        return cls.with_changes(body=cls.body.with_changes(body=body))


def _indexes_unassigned(facts: ClassFacts) -> bool:
    """Whether a compiled method indexes an attribute this class never assigns with something
    other than a literal, or unpacks what such an attribute yields in a loop header (a container
    a base class may build)."""
    assigned = {a.attr for a in facts.assignments}
    for name in facts.compiled:
        func = facts.methods[name]
        self_var = self_name(func)
        if self_var is None:
            continue
        never = facts.never_compiled(name)
        for node in find_all(func.body, cst.Subscript):
            attr = self_attr(node.value, self_var)
            index = single_index(node)
            if (attr is not None and attr not in assigned and index is not None
                    and id(node) not in never and not is_literal_key(index)):
                return True
        for loop in find_all(func.body, cst.For):
            if (id(loop) not in never and isinstance(loop.target, cst.Tuple | cst.List)
                    and any(self_attr(n, self_var) not in (None, *assigned)
                            for n in find_all(loop.iter, cst.Attribute))):
                return True
    return False


def _tensor_name(imports: dict[str, str]) -> str | None:
    """How the file can name torch.Tensor in an annotation (``Tensor``, ``torch.Tensor``), if it
    can: a ModuleDict lookup's result is typed ``Optional[<it>]``."""
    for local, full in imports.items():
        if full == "torch.Tensor":
            return local
    for local, full in imports.items():
        if full == "torch":
            return f"{local}.Tensor"
    return None


def _iterated(iterable: ast.expr) -> list[ast.expr]:
    """What a loop iterates: the iterable itself, or the arguments of ``enumerate``/``zip``."""
    if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name)
            and iterable.func.id in ("enumerate", "zip")):
        return [a for arg in iterable.args for a in _iterated(arg)]
    return [iterable]


def _literal(index: ast.expr, int_keys_ok: bool) -> bool:
    """An int (also negative) or string literal index: TorchScript takes those."""
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        index = index.operand
    return isinstance(index, ast.Constant) and (
        isinstance(index.value, str) or (int_keys_ok and isinstance(index.value, int)))
