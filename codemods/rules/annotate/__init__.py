"""``annotate``: the type annotations and signatures TorchScript needs.

What it does
    In the methods ``torch.jit.script`` compiles (the facts' ``compiled``: ``forward``, every
    ``@torch.jit.export`` method and what they call through ``self``, not what only a
    ``if not torch.jit.is_scripting():`` branch calls, never an ignored method):

    * parameters with a literal default get its type (``alpha=1.0`` -> ``alpha: float = 1.0``,
      ``size=(1, 3)`` -> ``size: Tuple[int, int] = (1, 3)``);
    * ``None`` defaults become ``Optional[T]``, ``T`` from the types seen in the example calls,
      else from how the body uses the value (``att.masked_fill(mask, ...)``, even when
      nothing says what ``att`` is: in compiled code only tensors have such methods;
      ``mask[:, None]`` and ``a @ mask`` are Tensors, ``scale = x.size(-1) ** -0.5`` a
      float, ``x.topk(k)`` an int),
      else from the callee it is passed to: ``self.rnn(x, hx)`` with ``self.rnn = nn.LSTM(...)``
      makes ``hx`` ``Optional[Tuple[Tensor, Tensor]]`` (``nn.GRU``/``nn.RNN``: ``Optional[
      Tensor]``; the masks of ``nn.MultiheadAttention`` and the transformer layers: Tensors),
      a method of the class or function of the file types it by its parameter's annotation
      (or by the one annotate has just given it: callees are annotated first), so does the
      ``forward`` of a module class of the file (classes go in file order) that a submodule
      is built from (``self.se_block = SEBlock(...)``) or that ``if isinstance(layer,
      SEBlock):`` narrows a loop variable to, and ``f(lengths * n)`` into a Tensor
      parameter (of a function of this file, or of another file of the tree: no annotation,
      no default) makes ``lengths`` a Tensor; so do a loss's input and target and a matrix
      product's operands (``F.cross_entropy(logits, labels)``), and ``p if p is not None else
      x`` gives ``p`` the type of ``x`` (``default(context, x)`` as none-helpers writes it).
      Last, arithmetic
      with a Tensor (``x = x * mask``) makes ``Optional[Tensor]`` when nothing else says
      anything: it fits a float as well, but unannotated the parameter is a Tensor to
      TorchScript anyway, with an undefined tensor for its default, so the scripted method
      fails when called without it (measured); ``Optional[Tensor]`` makes that call work;
    * an ``Optional`` parameter (inferred or the author's) that the method never tests or
      rebinds, and an ``Optional`` local it never tests (annotated so, or a copy of an
      attribute that may be None: ``skip = self.skip``), gets ``assert p is not None`` just
      before the statement of each use that needs it, in the use's own block (inside the
      ``if not self.empty:`` or loop that holds it: configurations that never reach the use
      are unchanged), when that use fails on None in eager code too (arithmetic, ``add``/
      ``sub``/``mul``/``div``, a tensor method or attribute, an index, a layer's or torch
      function's input) and runs whenever the statement does; one assert serves the later
      uses of its block until the name is rebound. Where a use has no such place (a
      conditional expression, ``and``/``or``, a comprehension) an inferred Optional is not
      written (it would not compile; unannotated it does) and the author's is reported;
    * a local set to None and then, inside a loop or branch, to values of one type ``T``
      becomes ``name: Optional[T] = None`` (TorchScript: "previously had type NoneType");
    * annotated ``None`` and mutable defaults: ``k: int = None`` -> ``k: Optional[int] = None``;
      ``sizes: List[int] = [2, 4]`` -> ``sizes: Optional[List[int]] = None`` plus a fill-in line
      (the author's list type is kept; a tuple would fix its length);
    * parameters without a default that are not tensors in the example calls (or whose uses
      say int/float/str) get that type; a Tensor parameter is left as it is;
    * mutable defaults: ``sizes=[1, 3]`` -> ``sizes: Tuple[int, int] = (1, 3)`` when the value
      is only read, else ``Optional[List[int]] = None`` plus ``if sizes is None: sizes = [1, 3]``;
    * (compiled methods' ``*args``/``**kwargs``/keyword-only parameters are
      ``variable-arguments``'s; module-level functions get the same rewrite here: keyword-only
      parameters become ordinary ones, unused ``*args``/``**kwargs`` go with ``--unsafe-fixes``);
    * empty literals whose elements are not tensors: ``lens = []`` + ``lens.append(x.size(0))``
      -> ``lens: List[int] = []`` (``{}`` likewise, ``Dict[str, T]``);
    * return annotations where the returns disagree (int vs float, ``[]`` vs ``[n]``);
    * module attributes: an empty list/dict attribute read in forward gets a class-level
      annotation (``ids: List[int]``); an attribute that may be None and is tested with
      ``is not None`` inside an ``and``/``or`` (or already declared ``Optional``) gets the
      ``Optional`` declaration and is copied to a local that the test refines;
    * tensor-valued elements of an integer list (``F.pad(x, [0, maxlen - n])`` with
      ``maxlen = lengths.max()``) are wrapped in ``int(...)``.

    Module-level functions of the same file that compiled code calls by name (forward,
    the methods it reaches, and those functions, transitively; not in code TorchScript never
    compiles, not a name the caller binds itself, not a ``@torch.jit.ignore`` function) are
    compiled too, with the same rule, and get the same treatment (speechbrain's
    ``compute_length_mask(data, length=None, len_dim=1)`` -> ``length: Optional[torch.
    Tensor] = None, len_dim: int = 1``), callees first: an argument a caller passes on to a
    parameter TorchScript types Tensor (unannotated, no default, used as one) is a Tensor.
    Their rewrite is part of the change of every class that reaches them, so its validation
    covers them; when validation rejects one of those classes the function (and every
    function reaching it) is left as it was. A function under another decorator is left
    (TorchScript compiles the wrapper). A function of ANOTHER file of the tree called by an
    imported name is not rewritten with the class (that file's change would not be validated
    with it): when its signature has what TorchScript rejects it is reported at the call.
    When a configured model stops in such a function (speechbrain's ``length_to_mask`` in
    ``dataio.py``, called from ECAPA's pooling), the fix loop rewrites its file with the
    function as compiled from elsewhere (``Rule.compiled_functions``): it is annotated, with
    the functions of its file it calls, as one change reported under ``length_to_mask()``,
    typed from the model's run where the code says nothing, and validated with the model
    (eager parity, then scripting, scripted parity and save/load once the model scripts).
    ``device=``/``dtype=`` keywords of torch calls and ``x.device``/``x.dtype`` type a
    parameter ``torch.device``/``torch.dtype``; observed devices and dtypes too.

    ``typing`` names are imported once, merged into the file's ``from typing import``.

    What ``tsfix check`` reports for it (TSF206-TSF210, one finding per parameter site of a
    compiled method or function, under the first class that compiles the function; TSF228 for
    an added assert, TSF229 for a declared local): each site is
    either fixed (rewritten as above) or refused with the reason it is left: a ``=None`` or
    mutable default whose type neither the code nor an example call tells (or an inferred
    ``Optional`` no assert can refine), a ``*args``/``**kwargs`` the body reads (or, without
    ``--unsafe-fixes``, any), keyword-only parameters that cannot become ordinary ones, a set
    default, a string annotation, a mutable default of a parameter already ``Optional``.

Why it breaks export
    TorchScript types every unannotated parameter as ``Tensor``: ``alpha=1.0`` fails at script
    time ("Expected a default value of type Tensor"), ``k`` called with an int fails at call time,
    and ``scale=None`` scripts but ``scale is not None`` folds to True. ``None`` defaults need
    ``Optional``; mutable defaults, keyword-only parameters, ``*args`` and ``**kwargs`` are
    rejected; ``[]`` is ``List[Tensor]`` and ``{}`` ``Dict[str, Tensor]``; mixed returns and
    empty-list attributes cannot be typed; an Optional attribute cannot be refined in place.
    An ``Optional`` value must be proven not None before arithmetic (``x + skip``), and a local
    first set to None cannot take a Tensor in a loop or branch.

Example
    Before::

        def forward(self, x, mask=None, temperature=1.0):
            lens = []
            for row in x:
                lens.append(row.size(0))
            if mask is not None:
                x = x.masked_fill(mask, 0.0)
            return x / temperature, lens

    After::

        def forward(self, x, mask: Optional[torch.Tensor] = None, temperature: float = 1.0):
            lens: List[int] = []
            ...

Fix safety
    Annotations, ``int(...)`` around values that are already integers, local copies of
    attributes and turning keyword-only parameters into ordinary ones keep every existing call
    working. A mutable default becomes a fresh value per call, which changes behaviour only for
    code that mutated its default (a bug in eager code too). Removing unused ``*args`` /
    ``**kwargs`` makes calls that passed extra arguments fail, so it is an unsafe fix, applied
    only with ``--unsafe-fixes`` and reported. Types come from observed calls first, else from
    the code; what neither decides is left alone and reported, and a wrong type fails
    validation, which then keeps the original.
"""

from __future__ import annotations

import ast

import libcst as cst
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import find_all
from tsfix.codemods.rules.annotate._classes import ClassAnnotator
from tsfix.codemods.rules.annotate._common import looks_at
from tsfix.codemods.rules.annotate._functions import ModuleFunctions
from tsfix.codemods.rules.base import Code, Example, Rule
from tsfix.codemods.rules.imports import add_module_import, add_typing_names

__all__ = ["Annotate"]


class Annotate(Rule):
    __doc__ = __doc__

    name = "annotate"
    # --rule all order: last: it types what is still untyped, including signatures lift-branch
    # extended.
    order = 100
    targets = ("torchscript", "onnx")      # torch.export does not need this fix
    CODES = (
        Code("TSF206", "unannotated-default", "unannotated parameter with a non-Tensor default",
             "An unannotated parameter is a Tensor to TorchScript: `alpha=1.0` fails (\"Expected a "
             "default value of type Tensor\"). Annotate it (`alpha: float = 1.0`)."),
        Code("TSF207", "untyped-none-default", "unannotated parameter defaulting to None",
             "`scale=None` scripts as a Tensor whose default is an undefined tensor: calling "
             "without it fails, passing an int or float fails, `is not None` folds to True. "
             "Annotate it (`scale: Optional[float] = None`, `mask: Optional[Tensor] = None`).",
             level="warning"),
        Code("TSF208", "none-default-not-optional", "None default on a non-Optional annotation",
             "`k: int = None` is rejected (\"Expected a default value of type int\"); the "
             "annotation must be Optional[int]."),
        Code("TSF209", "mutable-default", "mutable default argument",
             "List/dict/set defaults are rejected even when annotated (\"Mutable default "
             "parameters are not supported\"). Use a tuple, or Optional[...] = None."),
        Code("TSF228", "optional-not-refined", "Optional value used without a None test",
             "`x = x + skip` with `skip: Optional[Tensor]` fails (TorchScript must see `skip is "
             "not None` first). annotate adds `assert skip is not None` before the uses that "
             "need it, in their own block, when they fail on None in eager code too."),
        Code("TSF229", "none-initialised-local", "local set to None, then to another type",
             "`prev = None` and then `prev = x` inside a loop or branch fails (\"previously had "
             "type NoneType\"). Declare it: `prev: Optional[Tensor] = None`."),
    )
    summary = ("Annotate parameters, empty containers, returns and attributes that TorchScript "
               "cannot type")
    needs_observations = True

    INVALID = (
        Example(
            "import torch\nfrom torch import nn\n\n\n"
            "class Head(nn.Module):\n"
            "    def forward(self, x, alpha=1.0, flag=False, mode='a', size=(1, 3), dim=-1):\n"
            "        return x\n",
            "from typing import Tuple\n\nimport torch\nfrom torch import nn\n\n\n"
            "class Head(nn.Module):\n"
            "    def forward(self, x, alpha: float = 1.0, flag: bool = False, mode: str = 'a', "
            "size: Tuple[int, int] = (1, 3), dim: int = -1):\n"
            "        return x\n",
        ),
        Example(
            "import torch\nfrom torch import nn\n\n\n"
            "class Attention(nn.Module):\n"
            "    def forward(self, q, k, mask=None, scale=None):\n"
            "        if scale is None:\n"
            "            scale = q.size(-1) ** -0.5\n"
            "        scores = q @ k.transpose(-2, -1) * scale\n"
            "        if mask is not None:\n"
            "            scores = scores.masked_fill(mask, -1e9)\n"
            "        return scores.softmax(-1)\n",
            "from typing import Optional\n\nimport torch\nfrom torch import nn\n\n\n"
            "class Attention(nn.Module):\n"
            "    def forward(self, q, k, mask: Optional[torch.Tensor] = None, "
            "scale: Optional[float] = None):\n"
            "        if scale is None:\n"
            "            scale = q.size(-1) ** -0.5\n"
            "        scores = q @ k.transpose(-2, -1) * scale\n"
            "        if mask is not None:\n"
            "            scores = scores.masked_fill(mask, -1e9)\n"
            "        return scores.softmax(-1)\n",
        ),
        Example(
            "import torch\nfrom torch import nn\n\n\n"
            "class TopK(nn.Module):\n"
            "    def forward(self, x, k):\n"
            "        return x.topk(k, dim=-1).values\n",
            "import torch\nfrom torch import nn\n\n\n"
            "class TopK(nn.Module):\n"
            "    def forward(self, x, k: int):\n"
            "        return x.topk(k, dim=-1).values\n",
        ),
        Example(
            "import torch\nfrom torch import nn\n\n\n"
            "class Resize(nn.Module):\n"
            "    def forward(self, x, sizes=[1, 3], extra=[]):\n"
            "        extra.append(x.size(0))\n"
            "        return x.view(sizes), extra\n",
            "from typing import List, Optional, Tuple\n\nimport torch\nfrom torch import nn\n\n\n"
            "class Resize(nn.Module):\n"
            "    def forward(self, x, sizes: Tuple[int, int] = (1, 3), "
            "extra: Optional[List[int]] = None):\n"
            "        if extra is None:\n"
            "            extra = []\n"
            "        extra.append(x.size(0))\n"
            "        return x.view(sizes), extra\n",
        ),
        Example(
            "import torch\nfrom torch import nn\n\n\n"
            "class Lengths(nn.Module):\n"
            "    def forward(self, x, lengths):\n"
            "        lens = []\n"
            "        sizes = {}\n"
            "        for row in x:\n"
            "            lens.append(row.size(0))\n"
            "        sizes['batch'] = x.size(0)\n"
            "        maxlen = lengths.max()\n"
            "        x = torch.nn.functional.pad(x, [0, maxlen - x.size(1)])\n"
            "        return x, lens, sizes\n",
            "from typing import Dict, List\n\nimport torch\nfrom torch import nn\n\n\n"
            "class Lengths(nn.Module):\n"
            "    def forward(self, x, lengths):\n"
            "        lens: List[int] = []\n"
            "        sizes: Dict[str, int] = {}\n"
            "        for row in x:\n"
            "            lens.append(row.size(0))\n"
            "        sizes['batch'] = x.size(0)\n"
            "        maxlen = lengths.max()\n"
            "        x = torch.nn.functional.pad(x, [0, int(maxlen - x.size(1))])\n"
            "        return x, lens, sizes\n",
        ),
        Example(
            "import torch\nfrom torch import nn\n\n\n"
            "class Gain(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x * self.gain(x.size(0))\n\n"
            "    def gain(self, n: int):\n"
            "        if n > 1:\n"
            "            return 1\n"
            "        return 0.5\n",
            "import torch\nfrom torch import nn\n\n\n"
            "class Gain(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x * self.gain(x.size(0))\n\n"
            "    def gain(self, n: int) -> float:\n"
            "        if n > 1:\n"
            "            return 1.0\n"
            "        return 0.5\n",
        ),
        Example(
            "import torch\nfrom torch import nn\n\n\n"
            "class Tracker(nn.Module):\n"
            '    """Keeps ids."""\n\n'
            "    def __init__(self, use_offset=False):\n"
            "        super().__init__()\n"
            "        self.ids = []\n"
            "        self.offset = nn.Parameter(torch.zeros(4)) if use_offset else None\n\n"
            "    def remember(self, i: int):\n"
            "        self.ids.append(i)\n\n"
            "    def forward(self, x):\n"
            "        if self.offset is not None and self.offset.abs().sum() > 0:\n"
            "            x = x + self.offset\n"
            "        return x * len(self.ids)\n",
            "from typing import List, Optional\n\nimport torch\nfrom torch import nn\n\n\n"
            "class Tracker(nn.Module):\n"
            '    """Keeps ids."""\n'
            "    offset: Optional[torch.Tensor]\n"
            "    ids: List[int]\n\n"
            "    def __init__(self, use_offset=False):\n"
            "        super().__init__()\n"
            "        self.ids = []\n"
            "        self.offset = nn.Parameter(torch.zeros(4)) if use_offset else None\n\n"
            "    def remember(self, i: int):\n"
            "        self.ids.append(i)\n\n"
            "    def forward(self, x):\n"
            "        offset = self.offset\n"
            "        if offset is not None and offset.abs().sum() > 0:\n"
            "            x = x + offset\n"
            "        return x * len(self.ids)\n",
        ),
        Example(
            "from typing import List\n\nimport torch\nfrom torch import nn\n\n\n"
            "class Pool(nn.Module):\n"
            "    def forward(self, x, k: int = None):\n"
            "        if k is None:\n"
            "            k = 2\n"
            "        return x.topk(k).values\n\n"
            "    @torch.jit.export\n"
            "    def pool(self, x, sizes: List[int] = [2, 4], eps=1e-5):\n"
            "        return x.view(sizes) + eps\n",
            "from typing import List, Optional\n\nimport torch\nfrom torch import nn\n\n\n"
            "class Pool(nn.Module):\n"
            "    def forward(self, x, k: Optional[int] = None):\n"
            "        if k is None:\n"
            "            k = 2\n"
            "        return x.topk(k).values\n\n"
            "    @torch.jit.export\n"
            "    def pool(self, x, sizes: Optional[List[int]] = None, eps: float = 1e-5):\n"
            "        if sizes is None:\n"
            "            sizes = [2, 4]\n"
            "        return x.view(sizes) + eps\n",
        ),
    )
    VALID = (
        # Already annotated, and Tensor parameters: nothing to do.
        "from typing import Optional\n\nimport torch\nfrom torch import nn\n\n\n"
        "class Done(nn.Module):\n"
        "    def forward(self, x, y, mask: Optional[torch.Tensor] = None, "
        "scale: float = 1.0):\n"
        "        if mask is not None:\n"
        "            x = x.masked_fill(mask, 0.0)\n"
        "        return (x + y) * scale\n",
        # **kwargs that the body reads: no safe signature exists; reported.
        "import torch\nfrom torch import nn\n\n\n"
        "class Passthrough(nn.Module):\n"
        "    def forward(self, x, **kwargs):\n"
        "        return x * kwargs['scale']\n",
        # A None default whose type neither the code nor an example call tells: reported.
        "import torch\nfrom torch import nn\n\n\n"
        "class Hook(nn.Module):\n"
        "    def forward(self, x, state=None):\n"
        "        return x, state\n",
        # Methods compiled away (@torch.jit.ignore) and non-module classes are not touched.
        "import torch\nfrom torch import nn\n\n\n"
        "class Plain:\n"
        "    def forward(self, x, alpha=1.0):\n"
        "        return x\n\n\n"
        "class Debug(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return self.dump(x)\n\n"
        "    @torch.jit.ignore\n"
        "    def dump(self, x, path='out.txt'):\n"
        "        return x\n",
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        """Something annotate looks at: a compiled method's (or a module-level function's that
        a compiled method calls by name) unannotated or defaulted parameter, variadic or
        keyword-only parameters, a list or dict display, several returns of which one is a
        literal, a ``-> float`` return, or an attribute that ``__init__`` sets to None or to
        an empty container and compiled code reads (a class-level declaration)."""
        read: set[str] = set()
        functions = ({s.name: s for s in file.tree.body if isinstance(s, ast.FunctionDef)}
                     if file.tree is not None else {})
        called: list[str] = []
        for _, func in file.compiled:
            self_var = file.self_var(func)
            if looks_at(func, skip_first=True):
                return True
            for node in file.nodes_of(func):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id == self_var):
                    read.add(node.attr)
            called.extend(_called_functions(func, functions))
        for name in called:     # grows: the functions these call, transitively
            if looks_at(functions[name], skip_first=False):
                return True
            called.extend(c for c in _called_functions(functions[name], functions)
                          if c not in called)
        return bool(read & _maybe_none_or_empty(file))

    def prepare(self, module: cst.Module) -> None:
        self._functions = ModuleFunctions(self, module)
        # class -> the forward() parameter types annotate gave it (classes go in file order:
        # a submodule's class defined earlier types what its user passes to it)
        self._forward_types: dict[str, dict[str, str]] = {}

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        rewritten = super().transform_module_impl(tree)
        entries_changed = self._functions.annotate_entries()
        new_functions = self._functions.written({c.class_name for c in self.changes})
        if new_functions and (rewritten is not tree or entries_changed):
            body = [new_functions.pop(id(s), s) for s in rewritten.body]
            assert not new_functions, "a rewritten module function was not found in the module"
            rewritten = rewritten.with_changes(body=body)
        if entries_changed:
            rewritten = add_typing_names(rewritten, self.typing_names)
        if (rewritten is not tree and self.facts.torch_alias is None
                and "torch" not in self.facts.top_level_names
                and _torch_reads(rewritten) > _torch_reads(tree)):
            # An annotation spelled through the module (``torch.Tensor`` where the file has
            # only ``from torch import nn``, ``torch.nn.utils.rnn.PackedSequence``) needs it.
            rewritten = add_module_import(rewritten, "torch")
        return rewritten

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        return ClassAnnotator(self, cls, self._functions, self._forward_types).rewrite()


def _torch_reads(module: cst.Module) -> int:
    """How many attribute chains of ``module`` start at the name ``torch``."""
    return sum(1 for node in find_all(module, cst.Attribute)
               if isinstance(node.value, cst.Name) and node.value.value == "torch")


def _called_functions(func: ast.FunctionDef, functions: dict[str, ast.FunctionDef]) -> list[str]:
    """The module-level functions ``func`` calls by name (any call: an over-approximation)."""
    return list(dict.fromkeys(node.func.id for node in ast.walk(func)
                              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                              and node.func.id in functions))


def _maybe_none_or_empty(file: AstFile) -> set[str]:
    """Attributes the ``__init__`` of a module class sets to None, ``[]``/``{}``, or registers
    as a None buffer or parameter."""
    found: set[str] = set()
    for klass in {id(k): k for k, _ in file.compiled}.values():
        init = file.init_of(klass)
        for node in ast.walk(init) if init is not None else ():
            values = ([node.value.body, node.value.orelse]
                      if isinstance(node, ast.Assign | ast.AnnAssign)
                      and isinstance(node.value, ast.IfExp) else [getattr(node, "value", None)])
            if isinstance(node, ast.Assign | ast.AnnAssign) and any(
                    isinstance(value, ast.List | ast.Dict)
                    or (isinstance(value, ast.Constant) and value.value is None)
                    for value in values):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.update(t.attr for target in targets for t in ast.walk(target)
                             if isinstance(t, ast.Attribute))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr in ("register_buffer", "register_parameter")
                  and node.args and isinstance(node.args[0], ast.Constant)):
                found.add(str(node.args[0].value))
    return found
