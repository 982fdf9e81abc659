"""``ignore-numpy``: numpy statements moved into a ``@torch.jit.ignore`` method.

What it does
    In the methods ``torch.jit.script`` compiles (``forward()``, every ``@torch.jit.export``
    method and what they call through ``self``: the class facts' ``compiled``), each run
    of statements that use numpy is moved, as one block, into a new method of the class
    decorated ``@torch.jit.ignore``, and replaced by a call to it::

        n = x.size(1)
        w = self._numpy_window(n)        # was: window = np.hanning(n) ...

    numpy is found statically, by binding: names bound to the numpy module or to anything in
    it under any alias (``import numpy as np``, ``import numpy as onp``, ``from numpy import
    interp``), ``t.numpy()`` and ``torch.from_numpy(...)``. A statement also counts when it
    reads a variable that holds a numpy value (assigned by numpy code, with no TorchScript
    type): ``maxlen = int(lens.max())`` after ``lens = lengths.cpu().numpy()``.

    * A run is a maximal sequence of consecutive such statements in one suite (a method body or
      a nested block). A numpy-free statement between two runs joins them only when the later
      run reads a numpy value the earlier one made (it could not cross a TorchScript call
      otherwise); everything else stays compiled. A run ending in ``return <numpy expr>`` is
      replaced by ``return self._numpy_...(...)``.
    * An ``if``/``for``/``while``/``with``/``try`` that contains numpy moves whole when nothing
      in it escapes (no ``return``, and no ``break``/``continue`` leaving it); otherwise the
      rule works inside its bodies.
    * Inputs of the new method are the locals the block reads that may hold a value from
      before it (LibCST scope analysis: an assignment outside the block, not a definite one
      earlier in the block); outputs are the locals it assigns that are read after it, or
      anywhere in an enclosing loop. One output is returned as is, several as a tuple. A list
      or dict the block mutates in place is returned too (TorchScript passes a copy).
      ``self`` is not passed: the new method is a method, and reads ``self.<attr>`` itself.
    * Every parameter and the return are annotated. A type comes from the code first
      (annotations, literal defaults, ``x.size(0)`` is int, ``torch.from_numpy(...)`` a Tensor,
      flow-sensitive through the method), then from the example runs: a parameter's observed
      type, or a local's observed value at return -- trusted only at the textually last
      assignment of that local, since it is the last value. A block whose boundary type
      neither tells is left alone and reported.
    * The method is named after what it assigns: ``_numpy_window``, ``_numpy_mask_and_lengths``,
      ``_numpy_<a>_<b>_and_<c>``, ``_numpy_<a>_<b>_<c>_and_more``; after the returned names or
      ``_numpy_<method>_result`` for a returning block; after the attributes it sets, else
      ``_numpy_block``. ``_2``, ``_3`` are appended on a collision with any method, class
      attribute or ``self.<attr>`` of the class. It is placed right after the method it came
      from and carries a one-line docstring saying it runs in Python only.

    Not touched: methods already ``@torch.jit.ignore``/``@torch.jit.unused`` (so the rewrite is
    a fixed point), static/class methods and properties, and code in the non-scripting branch
    of ``if not torch.jit.is_scripting():`` (or the ``else`` of ``if
    torch.jit.is_scripting():``, or what follows ``if torch.jit.is_scripting(): return``).

    Every numpy use in compiled code is a ``tsfix check`` finding ``TSF205`` (declared by
    ``numpy-to-torch``): fixed here when its block moves, refused with the reason when not.
    Refused and reported, measured on torch 2.13:

    * the block calls ``self.<submodule>(...)`` or another method (``'ScriptModule' object is
      not callable`` from an ignored method; ``self.<sub>.forward(...)`` works);
    * it reads ``self.<attr>`` holding a numpy value (TorchScript drops such attributes, the
      ignored method cannot see them);
    * it mutates a list/dict attribute in place (the change is lost under script; rebinding
      ``self.<attr> = ...`` and in-place tensor updates do work);
    * a boundary variable holds a numpy value or has no known type; a variable changes type;
      an output is assigned on some paths only; a variable is read before its assignment
      from a later loop iteration; ``global``/``nonlocal``/``super()``; generators;
    * numpy in the header of a statement that cannot move (``if np.any(m): return ...``), or
      in a one-line body (``if c: return np.x(...)``).

    Types follow TorchScript's own defaults: an unannotated parameter without default is a
    Tensor (unless the body uses it as ``range(n)`` or a slice bound, or the examples saw
    another type), and an unannotated ``[]``/``{}`` is ``List[Tensor]``/``Dict[str,
    Tensor]``. An empty literal made right before the block for it to fill moves with it,
    typed from what the block stores (``rows.append(t)``: ``List[Tensor]``); one made earlier
    and assigned nowhere else is declared with that type where it is made (``found:
    List[int] = []``): the appends that would have told ``annotate`` its type now run in
    Python, out of its sight.

    The rule is a package: ``_analysis`` (a method's numpy uses, node index, locals,
    parameter types), ``_flow`` (the walk: types, numpy statements, runs), ``_boundary`` (a
    block's inputs, outputs and types), ``_emission`` (the call and the new method),
    ``_classes`` (one class: plan, name, emit, report) and ``_statements``/``_types``
    (helpers).

Why it breaks export
    TorchScript compiles no numpy at all, often with an unhelpful message (``cannot create weak
    reference to 'numpy.ufunc' object``, ``'Tensor' object has no attribute or method
    'numpy'``). A ``@torch.jit.ignore`` method is left to Python, so the module scripts and
    gives the same outputs -- but the artifact is **Python-only**: it runs from Python, and
    ``torch.jit.save`` fails on it ("Could not export Python function call"), and so does ONNX
    export. Translate the numpy code to torch (``numpy-to-torch`` does what has an exact
    equivalent) for an artifact that saves; this rule is for what remains.

Example
    Before::

        def forward(self, x, lengths):
            lens = lengths.cpu().numpy()
            mask = np.arange(x.size(1))[None, :] < lens[:, None]
            mask = torch.from_numpy(mask)
            return self.proj(x).masked_fill(~mask.unsqueeze(-1), 0.0)

    After::

        def forward(self, x, lengths):
            mask = self._numpy_mask(lengths, x)
            return self.proj(x).masked_fill(~mask.unsqueeze(-1), 0.0)

        @torch.jit.ignore
        def _numpy_mask(self, lengths: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            \"""Runs in Python only (torch.jit.ignore): TorchScript cannot compile numpy.\"""
            lens = lengths.cpu().numpy()
            mask = np.arange(x.size(1))[None, :] < lens[:, None]
            mask = torch.from_numpy(mask)
            return mask

Fix safety
    Eager behaviour is unchanged: the same statements run in the same order on the same
    values; the new method only adds a call. Under ``torch.jit.script`` the module now compiles
    and matches eager outputs (validation checks script and parity), but the artifact runs
    from Python only: ``torch.jit.save`` and ONNX export fail, which validation records as
    expected for this rule, and every rewritten class carries a note saying so. Values cross
    the call converted to the annotated types; a wrong type fails validation, which keeps the
    original. A declared empty literal (``found: List[int] = []``) is an annotation only.
"""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.numpy_usage import may_use_numpy
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.rules.base import Example, Rule
from tsfix.codemods.rules.ignore_numpy._classes import PYTHON_ONLY_NOTE, ClassRewriter
from tsfix.codemods.rules.ignore_numpy._emission import DOCSTRING

__all__ = ["DOCSTRING", "PYTHON_ONLY_NOTE", "IgnoreNumpy"]


class IgnoreNumpy(Rule):
    __doc__ = __doc__

    name = "ignore-numpy"
    order = 90
    targets = ("torchscript", "onnx")
    off_target = ("its output calls numpy at run time from a @torch.jit.ignore method, "
                  "which torch.export cannot trace; numpy-to-torch rewrites the numpy "
                  "calls instead")
    summary = "Move numpy statements of compiled methods into a @torch.jit.ignore method"
    needs_observations = True

    INVALID = (
        # A window computed with numpy from a tensor size.
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Windowed(nn.Module):\n"
            "    def forward(self, x):\n"
            "        n = x.size(-1)\n"
            "        window = torch.from_numpy(np.hanning(n)).to(x.dtype)\n"
            "        return x * window\n",
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Windowed(nn.Module):\n"
            "    def forward(self, x):\n"
            "        n = x.size(-1)\n"
            "        window = self._numpy_window(n, x)\n"
            "        return x * window\n\n"
            "    @torch.jit.ignore\n"
            "    def _numpy_window(self, n: int, x: torch.Tensor) -> torch.Tensor:\n"
            f"        {DOCSTRING}\n"
            "        window = torch.from_numpy(np.hanning(n)).to(x.dtype)\n"
            "        return window\n",
        ),
        # Lengths to a mask through .cpu().numpy(): the numpy value `lens` pulls the next
        # lines into the block; only the Tensor mask leaves it.
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Masked(nn.Module):\n"
            "    def forward(self, x, lengths):\n"
            "        lens = lengths.cpu().numpy()\n"
            "        maxlen = x.size(1)\n"
            "        mask = np.arange(maxlen)[None, :] < lens[:, None]\n"
            "        mask = torch.from_numpy(mask)\n"
            "        return x.masked_fill(~mask.unsqueeze(-1), 0.0)\n",
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Masked(nn.Module):\n"
            "    def forward(self, x, lengths):\n"
            "        mask = self._numpy_mask(lengths, x)\n"
            "        return x.masked_fill(~mask.unsqueeze(-1), 0.0)\n\n"
            "    @torch.jit.ignore\n"
            "    def _numpy_mask(self, lengths: torch.Tensor, x: torch.Tensor) "
            "-> torch.Tensor:\n"
            f"        {DOCSTRING}\n"
            "        lens = lengths.cpu().numpy()\n"
            "        maxlen = x.size(1)\n"
            "        mask = np.arange(maxlen)[None, :] < lens[:, None]\n"
            "        mask = torch.from_numpy(mask)\n"
            "        return mask\n",
        ),
        # Post-processing that returns: the call is returned.
        Example(
            "import numpy\nimport torch\nfrom torch import nn\n\n\n"
            "class Decode(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.proj = nn.Linear(8, 4)\n\n"
            "    def forward(self, x):\n"
            "        logits = self.proj(x)\n"
            "        return torch.from_numpy(numpy.argmax(logits.detach().numpy(), -1))\n",
            "import numpy\nimport torch\nfrom torch import nn\n\n\n"
            "class Decode(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.proj = nn.Linear(8, 4)\n\n"
            "    def forward(self, x):\n"
            "        logits = self.proj(x)\n"
            "        return self._numpy_forward_result(logits)\n\n"
            "    @torch.jit.ignore\n"
            "    def _numpy_forward_result(self, logits: torch.Tensor) -> torch.Tensor:\n"
            f"        {DOCSTRING}\n"
            "        return torch.from_numpy(numpy.argmax(logits.detach().numpy(), -1))\n",
        ),
        # Several outputs, `from numpy import`, and a helper that forward calls.
        Example(
            "from typing import List\n\nimport torch\nfrom numpy import cumsum\n"
            "from torch import nn\n\n\n"
            "class Spans(nn.Module):\n"
            "    def forward(self, x, durations: List[int]):\n"
            "        return self.expand(x, durations)\n\n"
            "    def expand(self, x, durations: List[int]):\n"
            "        ends = cumsum(durations)\n"
            "        total = int(ends[-1])\n"
            "        last = int(ends[-1] - durations[-1])\n"
            "        return x[:, last:total]\n",
            "from typing import List, Tuple\n\nimport torch\nfrom numpy import cumsum\n"
            "from torch import nn\n\n\n"
            "class Spans(nn.Module):\n"
            "    def forward(self, x, durations: List[int]):\n"
            "        return self.expand(x, durations)\n\n"
            "    def expand(self, x, durations: List[int]):\n"
            "        total, last = self._numpy_total_and_last(durations)\n"
            "        return x[:, last:total]\n\n"
            "    @torch.jit.ignore\n"
            "    def _numpy_total_and_last(self, durations: List[int]) -> Tuple[int, int]:\n"
            f"        {DOCSTRING}\n"
            "        ends = cumsum(durations)\n"
            "        total = int(ends[-1])\n"
            "        last = int(ends[-1] - durations[-1])\n"
            "        return total, last\n",
        ),
        # A loop that accumulates with numpy moves whole; the list it fills is handed back.
        Example(
            "from typing import List\n\nimport numpy as onp\nimport torch\n"
            "from torch import nn\n\n\n"
            "class Peaks(nn.Module):\n"
            "    def forward(self, x):\n"
            "        found: List[int] = []\n"
            "        for row in x:\n"
            "            found.append(int(onp.argmax(row.numpy())))\n"
            "        return x[:, max(found)]\n",
            "from typing import List\n\nimport numpy as onp\nimport torch\n"
            "from torch import nn\n\n\n"
            "class Peaks(nn.Module):\n"
            "    def forward(self, x):\n"
            "        found: List[int] = []\n"
            "        found = self._numpy_found(x, found)\n"
            "        return x[:, max(found)]\n\n"
            "    @torch.jit.ignore\n"
            "    def _numpy_found(self, x: torch.Tensor, found: List[int]) -> List[int]:\n"
            f"        {DOCSTRING}\n"
            "        for row in x:\n"
            "            found.append(int(onp.argmax(row.numpy())))\n"
            "        return found\n",
        ),
        # Numpy inside an `if` that returns: the rule works inside its body; the name of an
        # existing method is not reused.
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Clip(nn.Module):\n"
            "    def forward(self, x, clip: bool):\n"
            "        if clip:\n"
            "            lo = float(np.percentile(x.numpy(), 5))\n"
            "            return x.clamp(min=lo)\n"
            "        return x\n\n"
            "    def _numpy_lo(self):\n"
            "        return 0\n",
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Clip(nn.Module):\n"
            "    def forward(self, x, clip: bool):\n"
            "        if clip:\n"
            "            lo = self._numpy_lo_2(x)\n"
            "            return x.clamp(min=lo)\n"
            "        return x\n\n"
            "    @torch.jit.ignore\n"
            "    def _numpy_lo_2(self, x: torch.Tensor) -> float:\n"
            f"        {DOCSTRING}\n"
            "        lo = float(np.percentile(x.numpy(), 5))\n"
            "        return lo\n\n"
            "    def _numpy_lo(self):\n"
            "        return 0\n",
        ),
    )
    VALID = (
        # No numpy, or numpy only where TorchScript never looks: __init__, an ignored method,
        # the non-scripting branch.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Plain(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_buffer('w', torch.from_numpy(np.hanning(8)))\n\n"
        "    def forward(self, x):\n"
        "        if not torch.jit.is_scripting():\n"
        "            self.log(np.mean(x.numpy()))\n"
        "        return x * self.w\n\n"
        "    @torch.jit.ignore\n"
        "    def log(self, value: float) -> None:\n"
        "        print(np.round(value, 2))\n",
        # The block calls a submodule: not callable from an ignored method of a scripted
        # module; reported.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class CallsSub(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(4, 4)\n\n"
        "    def forward(self, x):\n"
        "        h = self.proj(x).detach().numpy()\n"
        "        return torch.from_numpy(np.tanh(h))\n",
        # A numpy value leaves the block and its type is unknown without example runs
        # (np.percentile gives a numpy float); reported.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Floor(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.norm = nn.LayerNorm(4)\n\n"
        "    def forward(self, x):\n"
        "        floor = np.percentile(x.numpy(), 10)\n"
        "        x = self.norm(x)\n"
        "        return x.clamp(min=floor)\n",
        # A name shadowing the numpy alias is not numpy.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Shadow(nn.Module):\n"
        "    def forward(self, x, np: int):\n"
        "        return x * np\n",
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        # Every numpy use spells the word (an import of numpy, ``t.numpy()``,
        # ``torch.from_numpy``), and only compiled methods of module classes are looked at.
        return may_use_numpy(file.text) and (file.tree is None or bool(file.compiled))

    def transform_module(self, tree: cst.Module) -> cst.Module:
        # Most files never mention numpy: skip even the base class's per-file setup.
        if not may_use_numpy(self.source_text if self.source_text is not None else tree.code):
            return tree
        return super().transform_module(tree)

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        return ClassRewriter(self, cls).rewrite()
