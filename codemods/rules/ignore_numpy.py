"""``ignore-numpy``: numpy statements moved into a ``@torch.jit.ignore`` method.

What it does
    In ``forward()`` and every method it reaches (what ``torch.jit.script`` compiles), each run
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
    torch.jit.is_scripting():``).

    Refused and reported (``-v``), measured on torch 2.13:

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

import bisect
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import GlobalScope, MetadataWrapper, ScopeProvider
from tsfix.codemods.facts.numpy_usage import (
    function_numpy_bindings,
    is_numpy_name,
    may_use_numpy,
    module_numpy_bindings,
    numpy_uses,
)
from tsfix.codemods.facts.syntax import (
    find_all,
    import_map,
    literal_type,
    methods_of,
    module_class_names,
    qualified_name,
    reachable_methods,
    self_attr,
    self_name,
)
from tsfix.codemods.facts.value_types import (
    TENSOR,
    Typer,
    annotation_text,
    is_complete,
    is_tensor_layer,
    parts_of,
    type_from_annotation,
    typing_names,
    unify,
    without_none,
)
from tsfix.codemods.rules.base import ClassChange, Example, Rule

# Type of a variable that holds a numpy value (assigned by numpy code; no TorchScript type).
NUMPY = "<numpy>"
Env = dict[str, str | None]

DOCSTRING = '"""Runs in Python only (torch.jit.ignore): TorchScript cannot compile numpy."""'
PYTHON_ONLY_NOTE = (
    "python only: {methods} {verb} @torch.jit.ignore; the scripted artifact runs from Python "
    "but cannot be saved with torch.jit.save nor exported to ONNX (translate the numpy code "
    "to torch for an artifact that saves)")

_IGNORED_DECORATORS = ("jit.ignore", "jit.unused")
# torch functions that return something other than one Tensor (PackedSequence, tuples, ...).
_NOT_TENSOR_PREFIXES = ("torch.nn.utils.", "torch.distributions.", "torch.utils.",
                        "torch.autograd.", "torch.jit.")
_NOT_COMPILED_DECORATORS = ("staticmethod", "classmethod", "property")
# In-place methods of lists, dicts and sets: TorchScript passes these to an ignored method as
# copies, so a block that mutates one must hand it back.
_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault",
             "popitem", "sort", "reverse", "add", "discard"}


# ---- the rule ----------------------------------------------------------------------------------

class IgnoreNumpy(Rule):
    __doc__ = __doc__

    name = "ignore-numpy"
    order = 90
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

    def transform_module(self, tree: cst.Module) -> cst.Module:
        # Most files never mention numpy: skip even the base class's per-file setup.
        if not may_use_numpy(self.source_text if self.source_text is not None else tree.code):
            return tree
        return super().transform_module(tree)

    def prepare(self, module: cst.Module) -> None:
        self.active = may_use_numpy(self.source_text if self.source_text is not None
                                    else module.code)
        if not self.active:
            return
        self.imports = import_map(module)
        self.bindings = module_numpy_bindings(module)
        self.module_classes = module_class_names(module, self.imports)
        torch_alias = next((local for local, full in self.imports.items() if full == "torch"),
                           None)
        jit_alias = next((local for local, full in self.imports.items()
                          if full == "torch.jit"), None)
        self.decorator = (f"{torch_alias}.jit.ignore" if torch_alias
                          else f"{jit_alias}.ignore" if jit_alias else None)
        if self.imports.get("Tensor") == "torch.Tensor":
            self.tensor_name: str | None = "Tensor"
        else:
            self.tensor_name = f"{torch_alias}.Tensor" if torch_alias else None

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.active or cls.name.value not in self.module_classes:
            return cls
        return _ClassRewriter(self, cls).rewrite()

    def annotation(self, kind: str) -> cst.Annotation:
        assert self.tensor_name is not None
        self.need_typing(*typing_names(kind))
        return cst.Annotation(cst.parse_expression(annotation_text(kind, self.tensor_name)))


# ---- one class ---------------------------------------------------------------------------------

@dataclass
class _Block:
    """A run of statements to move (or that was refused)."""

    method: str
    stmts: list[cst.BaseStatement]
    loops: tuple[cst.CSTNode, ...]
    env_in: Env
    env_out: Env
    returns: bool
    inputs: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    return_type: str | None = None
    attributes_set: list[str] = field(default_factory=list)
    imports: list[cst.SimpleStatementLine] = field(default_factory=list)
    observed_types: int = 0
    name: str = ""
    # ``name = []`` lines before the block that get the type the block stores in them.
    declare: list[tuple[cst.SimpleStatementLine, str, str]] = field(default_factory=list)


class _ClassRewriter:
    def __init__(self, rule: IgnoreNumpy, cls: cst.ClassDef) -> None:
        self.rule = rule
        self.cls = cls
        self.name = cls.name.value
        self.methods = methods_of(cls)
        compiled = {n: f for n, f in self.methods.items() if not _not_compiled(f)}
        roots = ["forward"] + [n for n, f in compiled.items() if _is_exported(f)]
        self.compiled: list[str] = []
        for root in roots:
            for name in reachable_methods(compiled, root):
                if name != "__init__" and name not in self.compiled:
                    self.compiled.append(name)
        self.observed = rule.observed.get(self.name, {})
        self._read_attributes()
        self.taken = self._taken_names()

    def _read_attributes(self) -> None:
        """What ``__init__`` stores on self: scalar types, tensors, layers, numpy values."""
        self.attributes: dict[str, str] = {}
        self.layers: set[str] = set()
        self.numpy_attributes: set[str] = set()
        self.containers: set[str] = set()
        init = self.methods.get("__init__")
        if init is None:
            return
        self_var = self_name(init) or "self"
        bindings = function_numpy_bindings(init, self.rule.bindings)
        typer = Typer({}, self.rule.imports, None)
        for assign in find_all(init.body, cst.Assign, cst.AnnAssign):
            targets = ([t.target for t in assign.targets] if isinstance(assign, cst.Assign)
                       else [assign.target])
            value = assign.value
            if value is None:
                continue
            for target in targets:
                attr = self_attr(target, self_var)
                if attr is None:
                    continue
                qualified = (qualified_name(value.func, self.rule.imports) or ""
                             if isinstance(value, cst.Call) else "")
                kind = typer.type_of(value)
                if is_tensor_layer(qualified):
                    self.layers.add(attr)
                elif qualified in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") or (
                        qualified.startswith("torch.") and qualified.count(".") == 1
                        and qualified.rpartition(".")[2][:1].islower()):
                    self.attributes[attr] = TENSOR
                elif numpy_uses(value, bindings, self.rule.imports) and not kind:
                    self.numpy_attributes.add(attr)
                elif isinstance(value, cst.List | cst.Dict | cst.Set) or (
                        isinstance(value, cst.Call)
                        and get_full_name_for_node(value.func) in ("list", "dict", "set")):
                    self.containers.add(attr)
                elif kind is not None and is_complete(kind):
                    self.attributes[attr] = kind
        for call in find_all(init.body, cst.Call):
            if (self_attr(call.func, self_var) is not None and len(call.args) >= 2
                    and call.func.attr.value in ("register_buffer", "register_parameter")
                    and isinstance(call.args[0].value, cst.SimpleString)):
                named = call.args[0].value.evaluated_value
                if isinstance(named, str):
                    self.attributes[named] = TENSOR

    def _taken_names(self) -> set[str]:
        taken = set(self.methods)
        if isinstance(self.cls.body, cst.IndentedBlock):
            for stmt in self.cls.body.body:
                for target in find_all(stmt, cst.AssignTarget, cst.AnnAssign):
                    if isinstance(target.target, cst.Name):
                        taken.add(target.target.value)
        for func in self.methods.values():
            self_var = self_name(func) or "self"
            for node in find_all(func.body, cst.Attribute):
                attr = self_attr(node, self_var)
                if attr is not None:
                    taken.add(attr)
        return taken

    def rewrite(self) -> cst.ClassDef:
        if not self.compiled or not isinstance(self.cls.body, cst.IndentedBlock):
            return self.cls
        rewritten: dict[str, tuple[cst.FunctionDef, list[cst.FunctionDef]]] = {}
        moved: list[_Block] = []
        problem = self._file_problem()
        for stmt in self.cls.body.body:
            if not isinstance(stmt, cst.FunctionDef) or stmt.name.value not in self.compiled:
                continue
            method = _MethodRewriter(self, stmt)
            blocks = method.plan()
            if not blocks:
                continue
            if problem is not None:
                self.rule.skip(self.name, blocks[0].stmts[0],
                               f"{stmt.name.value}(): {problem}")
                continue
            for block in blocks:
                block.name = self._fresh(_method_name(block))
            rewritten[stmt.name.value] = method.apply(blocks)
            moved.extend(blocks)
        if not moved:
            return self.cls
        body: list[cst.BaseStatement] = []
        for stmt in self.cls.body.body:
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value in rewritten:
                new_func, new_methods = rewritten[stmt.name.value]
                body.append(new_func)
                body.extend(new_methods)
            else:
                body.append(stmt)
        new_cls = self.cls.with_changes(body=self.cls.body.with_changes(body=body))
        where = []
        for block in moved:
            first, last = self.rule.span_of(block.stmts[0])[0], self.rule.span_of(
                block.stmts[-1])[1]
            lines = f"line {first}" if first == last else f"lines {first}-{last}"
            where.append(f"{block.name} ({lines})")
        summary = (f"moved {len(moved)} numpy block(s) into @torch.jit.ignore methods: "
                   + ", ".join(where))
        declared = [f"{name}: {kind}" for b in moved for _, name, kind in b.declare]
        if declared:
            summary += f"; declared {', '.join(declared)}"
        observed = sum(b.observed_types for b in moved)
        if observed:
            summary += f"; {observed} type(s) from the example runs"
        names = [b.name for b in moved]
        note = PYTHON_ONLY_NOTE.format(methods=", ".join(f"{n}()" for n in names),
                                       verb="is" if len(names) == 1 else "are")
        self.rule.changes.append(ClassChange(self.rule.name, self.name,
                                             self.rule.span_of(self.cls), summary,
                                             notes=[note], python_only=True))
        return new_cls

    def _file_problem(self) -> str | None:
        if self.rule.decorator is None or self.rule.tensor_name is None:
            return ("the file does not import torch (`import torch`), which the "
                    "@torch.jit.ignore decorator needs; left alone")
        return None

    def _fresh(self, wanted: str) -> str:
        name, n = wanted, 1
        while name in self.taken:
            n += 1
            name = f"{wanted}_{n}"
        self.taken.add(name)
        return name


# ---- one method --------------------------------------------------------------------------------

@dataclass
class _Local:
    """Where a function-scope name is assigned and read (pre-order node indexes)."""

    assigns: list[int] = field(default_factory=list)
    reads: list[int] = field(default_factory=list)
    mutations: list[int] = field(default_factory=list)
    import_only: bool = True


@dataclass
class _Item:
    stmt: cst.BaseStatement
    kind: str            # numpy | return | plain | barrier


class _MethodRewriter:
    def __init__(self, owner: _ClassRewriter, func: cst.FunctionDef) -> None:
        self.owner = owner
        self.rule = owner.rule
        self.func = func
        self.method = func.name.value
        self.self_var = self_name(func) or "self"
        self.bindings = function_numpy_bindings(func, self.rule.bindings)
        self.observed = owner.observed.get(self.method, {})
        self.blocks: list[_Block] = []
        self.env_before: dict[int, Env] = {}
        self.env_after: dict[int, Env] = {}
        self.from_observation: set[str] = set()
        self.reported: set[int] = set()

    def skip(self, node: cst.CSTNode, reason: str) -> None:
        if id(node) in self.reported:
            return
        self.reported.add(id(node))
        self.rule.skip(self.owner.name, node, f"{self.method}(): {reason}")

    # -- analysis ------------------------------------------------------------------------------

    def plan(self) -> list[_Block]:
        """The blocks this method gives up to ignored methods (refused ones are reported)."""
        body = self.func.body
        uses = numpy_uses(body, self.bindings, self.rule.imports)
        if not uses:
            return []
        if not isinstance(body, cst.IndentedBlock):
            self.skip(self.func, "a one-line method body using numpy; left alone")
            return []
        if _own(body, cst.Yield, cst.Await):
            self.skip(self.func, "a generator (or coroutine) using numpy; left alone")
            return []
        self._index()
        self._excluded_ranges()
        self.use_positions = sorted(self.start[id(u.node)] for u in uses
                                    if not self._excluded(self.start[id(u.node)]))
        self.from_numpy = {id(u.node) for u in uses if u.name == "torch.from_numpy"}
        if not self.use_positions:
            return []
        self._scope()
        self.typer = _NumpyTyper(self)
        env = self._parameter_env()
        self.suite(body.body, env, (), collect=True)
        accepted = []
        for block in self.blocks:
            reason = self._analyse(block)
            if reason is None:
                accepted.append(block)
            else:
                self.skip(block.stmts[0], reason + "; left alone")
        return accepted

    def _index(self) -> None:
        """Pre-order index and subtree end of every node of the method."""
        self.start: dict[int, int] = {}
        self.end: dict[int, int] = {}
        self.nodes: list[cst.CSTNode] = []
        stack: list[tuple[cst.CSTNode, bool]] = [(self.func, False)]
        while stack:
            node, done = stack.pop()
            if done:
                self.end[id(node)] = len(self.nodes) - 1
                continue
            self.start[id(node)] = len(self.nodes)
            self.nodes.append(node)
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(find_all_children(node)))

    def _excluded_ranges(self) -> None:
        """Index ranges never compiled: the non-scripting branch of ``is_scripting()`` tests."""
        self.excluded: list[tuple[int, int]] = []
        for node in find_all(self.func.body, cst.If):
            test, negated = node.test, False
            if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                test, negated = test.expression, True
            if not (isinstance(test, cst.Call) and qualified_name(
                    test.func, self.rule.imports) == "torch.jit.is_scripting"):
                continue
            branch = node.body if negated else node.orelse
            if branch is not None:
                self.excluded.append((self.start[id(branch)], self.end[id(branch)]))

    def _holds_excluded(self, node: cst.CSTNode) -> bool:
        first, last = self.start[id(node)], self.end[id(node)]
        return any(first <= a and b <= last for a, b in self.excluded)

    def _excluded(self, position: int) -> bool:
        return any(a <= position <= b for a, b in self.excluded)

    def _scope(self) -> None:
        """Assignments and reads of each function-scope name, from LibCST scope analysis of
        this method alone."""
        wrapper = MetadataWrapper(cst.Module(body=[self.func]), unsafe_skip_copy=True)
        scopes = wrapper.resolve(ScopeProvider)
        body = self.func.body
        assert isinstance(body, cst.IndentedBlock)
        scope = scopes[body.body[0]]
        assert scope is not None
        self.locals: dict[str, _Local] = {}
        for assignment in scope.assignments:
            node = getattr(assignment, "node", None)
            if node is None:
                continue
            local = self.locals.setdefault(assignment.name, _Local())
            local.import_only = local.import_only and _imports_numpy(node)
            if id(node) in self.start:
                local.assigns.append(self.start[id(node)])
        # Reads: every access that resolves to this function's scope. (An Assignment's
        # ``references`` leave out accesses written before it, such as loop-carried reads.)
        for inner in {id(s): s for s in scopes.values() if s is not None}.values():
            for access in inner.accesses:
                name = access.node.value if isinstance(access.node, cst.Name) else None
                if name is None or name not in self.locals or id(access.node) not in self.start:
                    continue
                owner = inner
                while owner is not scope and name not in owner.assignments:
                    if owner.parent is owner or isinstance(owner, GlobalScope):
                        break
                    owner = owner.parent
                if owner is scope:
                    self.locals[name].reads.append(self.start[id(access.node)])
        for aug in find_all(self.func.body, cst.AugAssign):
            # ``a += 1`` reads ``a`` too; LibCST records it as an assignment only.
            if isinstance(aug.target, cst.Name) and aug.target.value in self.locals:
                self.locals[aug.target.value].reads.append(self.start[id(aug.target)])
        for node in find_all(self.func.body, cst.Call, cst.AssignTarget, cst.AugAssign,
                             cst.Del):
            root: cst.BaseExpression | None = None
            if isinstance(node, cst.Call):
                if isinstance(node.func, cst.Attribute) and node.func.attr.value in _MUTATORS:
                    root = node.func.value
            else:
                target = node.target
                if isinstance(target, cst.Subscript):
                    root = target.value
            if isinstance(root, cst.Name) and root.value in self.locals:
                self.locals[root.value].mutations.append(self.start[id(node)])
        for local in self.locals.values():
            local.reads = sorted(set(local.reads))
            local.assigns.sort()

    def _parameter_env(self) -> Env:
        env: Env = {}
        params = self.func.params
        listed = [*params.posonly_params, *params.params, *params.kwonly_params]
        for index, param in enumerate(listed):
            name = param.name.value
            if index == 0 and self_name(self.func) is not None:
                continue
            env[name] = self._parameter_type(param)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                env[star.name.value] = None
        return env

    def _parameter_type(self, param: cst.Param) -> str | None:
        name = param.name.value
        if param.annotation is not None:
            return type_from_annotation(param.annotation.annotation)
        observed = _observation(self.observed.get(name))
        default = param.default
        if default is None:
            if observed == TENSOR:
                return TENSOR
            if observed is not None and observed != "None":
                self.from_observation.add(name)
                return observed
            # TorchScript's own rule: an unannotated parameter is a Tensor -- unless the body
            # clearly uses it as a number (then annotate, or nothing, decides).
            return None if self._used_as_number(name) else TENSOR
        if isinstance(default, cst.Name) and default.value == "None":
            inner = without_none(observed) if observed else None
            if inner is not None and is_complete(inner):
                self.from_observation.add(name)
                return f"Optional[{inner}]"
            return None
        literal = literal_type(default)
        if literal is None:
            if observed is not None and observed != "None":
                self.from_observation.add(name)
                return observed
            return None
        if observed is not None and without_none(observed):
            widened = unify(literal, without_none(observed))
            if widened is not None:
                return widened
        return literal

    def _used_as_number(self, name: str) -> bool:
        """``range(n)``, ``x[:n]``: a parameter used so is not a Tensor."""
        for node in find_all(self.func.body, cst.Call, cst.Slice):
            if isinstance(node, cst.Call):
                if get_full_name_for_node(node.func) == "range" and any(
                        _is_name(a.value, name) for a in node.args):
                    return True
            elif any(_is_name(bound, name) for bound in (node.lower, node.upper, node.step)):
                return True
        return False

    # -- the flow walk: types, numpy statements, runs -------------------------------------------

    def suite(self, stmts: Sequence[cst.BaseStatement], env: Env,
              loops: tuple[cst.CSTNode, ...], collect: bool) -> Env:
        items: list[_Item] = []
        for stmt in stmts:
            self.env_before[id(stmt)] = dict(env)
            kind, env = self.statement(stmt, env, loops, collect)
            self.env_after[id(stmt)] = dict(env)
            items.append(_Item(stmt, kind))
        if collect:
            self._runs(items, loops)
        return env

    def statement(self, stmt: cst.BaseStatement, env: Env, loops: tuple[cst.CSTNode, ...],
                  collect: bool) -> tuple[str, Env]:
        if isinstance(stmt, cst.SimpleStatementLine):
            numpy = self._has_numpy(stmt, env)
            if numpy and _is_import_line(stmt):
                numpy = False
            kind = "numpy" if numpy else "plain"
            smalls = stmt.body
            if any(isinstance(s, cst.Return) for s in smalls):
                kind = "return" if numpy else "barrier"
            elif any(isinstance(s, cst.Break | cst.Continue | cst.Global | cst.Nonlocal
                                | cst.Import | cst.ImportFrom) for s in smalls):
                if numpy and collect:
                    self.skip(stmt, "numpy on a line with `break`/`continue`/`global`/an "
                              "import, which cannot move; left alone")
                kind = "barrier"
            if kind != "barrier":
                reason = self._forbidden(stmt)
                if reason is not None:
                    if numpy and collect:
                        self.skip(stmt, f"{reason}; left alone")
                    kind = "barrier"
            return kind, self._simple_effects(stmt.body, env, numpy, stmt)
        if not self._has_numpy(stmt, env):
            after = self._compound(stmt, env, loops, False)
            movable = (_escape(stmt) is None and self._forbidden(stmt) is None
                       and not self._holds_excluded(stmt))
            return ("plain" if movable else "barrier"), after
        reason = _escape(stmt) or self._forbidden(stmt)
        if reason is None:
            after = self._compound(stmt, env, loops, False)
            return "numpy", self._taint(stmt, env, after)
        if collect:
            self._header(stmt, env, reason)
        return "barrier", self._compound(stmt, env, loops, collect)

    def _header(self, stmt: cst.CSTNode, env: Env, reason: str) -> None:
        """Numpy in the header of a statement that cannot move cannot be moved either."""
        headers: list[cst.CSTNode] = []
        if isinstance(stmt, cst.If | cst.While):
            headers.append(stmt.test)
        elif isinstance(stmt, cst.For):
            headers.extend([stmt.target, stmt.iter])
        elif isinstance(stmt, cst.With):
            headers.extend(stmt.items)
        keyword = {cst.If: "if", cst.While: "while", cst.For: "for", cst.With: "with",
                   cst.Try: "try"}.get(type(stmt), "compound")
        for header in headers:
            if self._has_numpy(header, env):
                self.skip(stmt, f"the `{keyword}` header uses numpy, and the statement cannot "
                          f"move as a whole: {reason}; left alone")
                return
        if not isinstance(stmt, cst.If | cst.While | cst.For | cst.With | cst.Try):
            self.skip(stmt, f"numpy inside a `{type(stmt).__name__}` statement; left alone")

    def _has_numpy(self, node: cst.CSTNode, env: Env) -> bool:
        first, last = self.start[id(node)], self.end[id(node)]
        at = bisect.bisect_left(self.use_positions, first)
        if at < len(self.use_positions) and self.use_positions[at] <= last:
            return True
        for name, kind in env.items():
            if kind == NUMPY:
                local = self.locals.get(name)
                if local and any(first <= r <= last and not self._excluded(r)
                                 for r in local.reads):
                    return True
        return False

    def _forbidden(self, stmt: cst.CSTNode) -> str | None:
        """Why ``stmt`` cannot run inside an ignored method of a scripted module."""
        self_var = self.self_var
        for node in find_all(stmt, cst.Call, cst.Attribute, cst.Global, cst.Nonlocal,
                             cst.AssignTarget, cst.AugAssign, cst.Yield, cst.Await):
            if isinstance(node, cst.Global | cst.Nonlocal):
                return "`global`/`nonlocal` in the block"
            if isinstance(node, cst.Yield | cst.Await):
                return "`yield`/`await` in the block"
            if isinstance(node, cst.AssignTarget | cst.AugAssign):
                if isinstance(node.target, cst.Name) and node.target.value == self_var:
                    return f"the block rebinds `{self_var}`"
                target = node.target
                if isinstance(target, cst.Subscript):
                    attr = self_attr(target.value, self_var)
                    if attr is not None and attr in self.owner.containers:
                        return (f"the block changes self.{attr} in place, and under script "
                                "an ignored method sees a copy of a list/dict attribute")
                continue
            if isinstance(node, cst.Attribute):
                attr = self_attr(node, self_var)
                if attr is not None and attr in self.owner.numpy_attributes:
                    return (f"the block reads self.{attr}, a numpy value TorchScript drops "
                            "from the scripted module (an ignored method cannot see it; "
                            "register it as a buffer)")
                continue
            func = node.func
            if isinstance(func, cst.Call) and get_full_name_for_node(func.func) == "super":
                return "the block calls super()"
            if isinstance(func, cst.Name) and func.value == "super":
                return "the block calls super()"
            attr = self_attr(func, self_var)
            if attr is not None:
                what = ("submodule" if attr in self.owner.layers or attr not in
                        self.owner.methods else "method")
                return (f"the block calls {self_var}.{attr}(...), a {what} that cannot be "
                        "called from a @torch.jit.ignore method of a scripted module "
                        "('ScriptModule' object is not callable"
                        + ("; call .forward(...)" if what == "submodule" else "") + ")")
            if isinstance(func, cst.Attribute) and func.attr.value in _MUTATORS:
                attr = self_attr(func.value, self_var)
                if attr is not None and self.owner.attributes.get(attr) != TENSOR:
                    return (f"the block changes self.{attr} in place ({func.attr.value}), and "
                            "under script an ignored method sees a copy of a list/dict "
                            "attribute")
        return None

    def _simple_effects(self, smalls: Sequence[cst.BaseSmallStatement], env: Env, numpy: bool,
                        stmt: cst.CSTNode) -> Env:
        """The types after a line of small statements (``stmt`` is the line)."""
        env = dict(env)
        bound: list[str] = []
        for small in smalls:
            self.typer.env = env
            if isinstance(small, cst.Assign):
                kind = self.typer.type_of(small.value)
                for target in small.targets:
                    self._bind(target.target, kind, env, bound)
            elif isinstance(small, cst.AnnAssign):
                self._bind(small.target, type_from_annotation(small.annotation.annotation),
                           env, bound)
            elif isinstance(small, cst.AugAssign):
                operator = getattr(cst, type(small.operator).__name__.removesuffix("Assign"),
                                   None)
                kind = None
                if operator is not None:
                    kind = self.typer.type_of(cst.BinaryOperation(small.target, operator(),
                                                                  small.value))
                self._bind(small.target, kind, env, bound)
            elif isinstance(small, cst.Import | cst.ImportFrom):
                for alias in (small.names if not isinstance(small.names, cst.ImportStar)
                              else ()):
                    local = alias.asname.name if alias.asname else alias.name
                    for name in find_all(local, cst.Name)[:1]:
                        env[name.value] = None
        for name in bound:
            self._settle(name, env, numpy, stmt)
        return env

    def _settle(self, name: str, env: Env, numpy: bool, stmt: cst.CSTNode) -> None:
        """A name just assigned: unknown types come from the example runs when this is the
        last assignment of the name, and a numpy statement's untyped results hold numpy."""
        kind = env.get(name)
        if kind is not None and kind != NUMPY and is_complete(kind):
            return
        seen = self._observed_local(name, stmt)
        if seen is not None:
            env[name] = seen
            self.from_observation.add(name)
        elif numpy:
            env[name] = NUMPY

    def _observed_local(self, name: str, stmt: cst.CSTNode) -> str | None:
        seen = _observation(self.observed.get(f"local {name}"))
        local = self.locals.get(name)
        if seen is None or seen == "None" or not is_complete(seen) or local is None:
            return None
        # The observed value is the last one: trust it at the last assignment only.
        last = max(local.assigns) if local.assigns else -1
        return seen if self.start[id(stmt)] <= last <= self.end[id(stmt)] else None

    def _bind(self, target: cst.BaseExpression, kind: str | None, env: Env,
              bound: list[str]) -> None:
        if isinstance(target, cst.Name):
            env[target.value] = kind
            bound.append(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            parts: list[str | None] = [None] * len(target.elements)
            if kind == NUMPY:
                parts = [NUMPY] * len(target.elements)
            elif kind is not None:
                head, args = parts_of(kind)
                if head == "Tuple" and len(args) == len(target.elements):
                    parts = list(args)
                elif head == "List" and args and args[0] != "?":
                    parts = [args[0]] * len(target.elements)     # b, t = x.shape
            for element, part in zip(target.elements, parts, strict=True):
                value = element.value
                self._bind(value.value if isinstance(value, cst.StarredElement) else value,
                           None if isinstance(element, cst.StarredElement) else part, env,
                           bound)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, None, env, bound)

    def _taint(self, stmt: cst.CSTNode, before: Env, after: Env) -> Env:
        """Names a moved-whole compound statement assigns: untyped ones hold numpy."""
        after = dict(after)
        for name, local in self.locals.items():
            if any(self.start[id(stmt)] <= a <= self.end[id(stmt)] for a in local.assigns):
                kind = after.get(name)
                if kind is None or kind == NUMPY or not is_complete(kind):
                    seen = self._observed_local(name, stmt)
                    if seen is not None:
                        after[name] = seen
                        self.from_observation.add(name)
                    else:
                        after[name] = NUMPY
        return after

    def _compound(self, stmt: cst.BaseStatement, env: Env, loops: tuple[cst.CSTNode, ...],
                  collect: bool) -> Env:
        """The types after a compound statement (walking its bodies; runs inside are
        collected when ``collect``)."""
        if isinstance(stmt, cst.If):
            taken = self._body(stmt.body, env, loops, collect)
            if stmt.orelse is None:
                return _merge(env, taken)
            if isinstance(stmt.orelse, cst.If):
                if collect and self._has_numpy(stmt.orelse.test, env):
                    self._header(stmt.orelse, env, _escape(stmt.orelse) or "it cannot move")
                other = self._compound(stmt.orelse, env, loops, collect)
            else:
                other = self._body(stmt.orelse.body, env, loops, collect)
            return _merge(taken, other)
        if isinstance(stmt, cst.For | cst.While):
            inner = (*loops, stmt)
            start = dict(env)
            if isinstance(stmt, cst.For):
                self.typer.env = env
                bound: list[str] = []
                self._bind(stmt.target, self._iterated(stmt.iter), start, bound)
            first = self._body(stmt.body, start, inner, False)
            again = _merge(start, first)
            result = _merge(env, self._body(stmt.body, again, inner, collect))
            if stmt.orelse is not None:
                result = self._body(stmt.orelse.body, result, loops, collect)
            return result
        if isinstance(stmt, cst.With):
            start = dict(env)
            for item in stmt.items:
                if item.asname is not None:
                    self._bind(item.asname.name, None, start, [])
            return self._body(stmt.body, start, loops, collect)
        if isinstance(stmt, cst.Try):
            tried = self._body(stmt.body, env, loops, collect)
            merged = _merge(env, tried)
            result = tried
            for handler in stmt.handlers:
                start = dict(merged)
                if handler.name is not None:
                    self._bind(handler.name.name, None, start, [])
                result = _merge(result, self._body(handler.body, start, loops, collect))
            if stmt.orelse is not None:
                result = _merge(result, self._body(stmt.orelse.body, tried, loops, collect))
            if stmt.finalbody is not None:
                result = self._body(stmt.finalbody.body, result, loops, collect)
            return result
        # Nested definitions and anything else: what they bind is unknown.
        after = dict(env)
        for name, local in self.locals.items():
            if any(self.start[id(stmt)] <= a <= self.end[id(stmt)] for a in local.assigns):
                after[name] = None
        return after

    def _body(self, body: cst.BaseSuite, env: Env, loops: tuple[cst.CSTNode, ...],
              collect: bool) -> Env:
        if isinstance(body, cst.IndentedBlock):
            return self.suite(body.body, env, loops, collect)
        # ``if x: a = 1`` on one line: its small statements cannot be split into a block.
        if collect and self._has_numpy(body, env):
            self.skip(body, "numpy in a one-line body of a statement that cannot move; "
                      "left alone")
        assert isinstance(body, cst.SimpleStatementSuite)
        return self._simple_effects(body.body, env, self._has_numpy(body, env), body)

    def _iterated(self, node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Call) and get_full_name_for_node(node.func) == "range":
            return "int"
        kind = self.typer.type_of(node)
        if kind == NUMPY or (isinstance(node, cst.Name) and self.typer.env.get(node.value)
                             == NUMPY):
            return NUMPY
        if kind is None:
            return None
        head, args = parts_of(kind)
        if head == "List" and args and args[0] != "?":
            return args[0]
        return TENSOR if kind == TENSOR else None

    def _runs(self, items: list[_Item], loops: tuple[cst.CSTNode, ...]) -> None:
        runs: list[list[int]] = []
        current: list[int] | None = None
        for index, item in enumerate(items):
            if item.kind in ("numpy", "return"):
                if current is None:
                    current = [index, index]
                    runs.append(current)
                current[1] = index
                if item.kind == "return":
                    current = None
            else:
                current = None
        # Join two runs across numpy-free statements when the later one needs a numpy value
        # the earlier one made.
        merged = True
        while merged:
            merged = False
            for k in range(len(runs) - 1):
                earlier, later = runs[k], runs[k + 1]
                if items[earlier[1]].kind == "return":
                    continue
                gap = items[earlier[1] + 1:later[0]]
                if any(item.kind != "plain" for item in gap):
                    continue
                env = self.env_after[id(items[earlier[1]].stmt)]
                lo = self.start[id(items[later[0]].stmt)]
                hi = self.end[id(items[later[1]].stmt)]
                if any(kind == NUMPY and name in self.locals and any(
                        lo <= r <= hi for r in self.locals[name].reads)
                        for name, kind in env.items()):
                    runs[k] = [earlier[0], later[1]]
                    del runs[k + 1]
                    merged = True
                    break
        for first, last in runs:
            # An empty list/dict made right before the block for it to fill goes with it.
            while first > 0 and items[first - 1].kind == "plain" and self._fills(
                    items[first - 1].stmt, items[first].stmt, items[last].stmt):
                first -= 1
            stmts = [item.stmt for item in items[first:last + 1]]
            self.blocks.append(_Block(self.method, stmts, loops,
                                      self.env_before[id(stmts[0])],
                                      self.env_after[id(stmts[-1])],
                                      items[last].kind == "return"))

    def _fills(self, init: cst.BaseStatement, first: cst.BaseStatement,
               last: cst.BaseStatement) -> bool:
        """``init`` is ``name = []`` (or ``{}``) and the statements first..last read name."""
        name = _empty_container_name(init)
        local = self.locals.get(name or "")
        if local is None:
            return False
        lo, hi = self.start[id(first)], self.end[id(last)]
        return any(lo <= r <= hi for r in local.reads)

    # -- one block's boundary --------------------------------------------------------------------

    def _analyse(self, block: _Block) -> str | None:
        """Fill in the block's inputs, outputs and types; the reason it cannot move, if any."""
        lo, hi = self.start[id(block.stmts[0])], self.end[id(block.stmts[-1])]
        tops = [(self.start[id(s)], self.end[id(s)]) for s in block.stmts]
        loop_ranges = [(self.start[id(loop)], self.end[id(loop)]) for loop in block.loops]

        def top_of(position: int) -> int:
            return next(k for k, (a, b) in enumerate(tops) if a <= position <= b)

        def in_loop(position: int) -> bool:
            return any(a <= position <= b for a, b in loop_ranges)

        definite = [_definitely_assigned(s) for s in block.stmts]
        inputs: list[tuple[int, str]] = []
        outputs: list[tuple[int, str]] = []
        for name, local in self.locals.items():
            reads_in = [r for r in local.reads if lo <= r <= hi]
            assigns_in = [a for a in local.assigns if lo <= a <= hi]
            if name == self.self_var:
                if assigns_in:
                    return f"the block rebinds `{name}`"
                continue
            if local.import_only:
                if reads_in:
                    block.imports.extend(self._import_lines(name))
                continue
            before = [a for a in local.assigns if a < lo]
            later_in_loop = [a for a in local.assigns if a > hi and in_loop(a)]
            is_input = False
            if reads_in:
                first_top = top_of(reads_in[0])
                if not any(name in definite[k] for k in range(first_top)):
                    if before:
                        is_input = True
                    elif later_in_loop:
                        return (f"`{name}` is read before it is assigned, from a later "
                                "iteration of the loop; it may be unbound")
            if is_input:
                inputs.append((reads_in[0], name))
            reads_after = [r for r in local.reads
                           if not lo <= r <= hi and (r > hi or in_loop(r))]
            if block.returns:
                reads_after = []     # nothing runs after a return
            if assigns_in and reads_after:
                if not any(name in names for names in definite):
                    if not before:
                        return (f"`{name}` is assigned on some paths of the block only and "
                                "read after it")
                    if not is_input:
                        inputs.append((assigns_in[0], name))
                        is_input = True
                outputs.append((assigns_in[0], name))
            elif is_input and reads_after and any(lo <= m <= hi for m in local.mutations):
                outputs.append((reads_in[0], name))
        for _, name in sorted(inputs):
            raw = block.env_in.get(name)
            kind = self._filled(name, block, raw)
            default = _script_default(raw)
            if default is not None:
                # An unannotated `[]`/`{}` is List[Tensor]/Dict[str, Tensor] to TorchScript.
                if kind is not None and is_complete(kind) and kind != default:
                    init = self._sole_empty_init(name, local_before=lo)
                    if init is None:
                        return (f"`{name}` is an unannotated empty literal, which TorchScript "
                                f"types {default}, but the block stores {kind} in it "
                                f"(annotate it: `{name}: {kind} = ...`)")
                    # Declare what the block stores, where the literal is made.
                    block.declare.append((init, name, kind))
                else:
                    kind = default
            if kind == NUMPY:
                return (f"`{name}` is read by the block but holds a numpy value from code "
                        "before it that stays compiled (no TorchScript type)")
            if kind is None or not is_complete(kind):
                return (f"cannot tell the type of `{name}`, which the block reads (no "
                        "annotation, example run or static type)")
            block.inputs.append((name, kind))
            if name in self.from_observation:
                block.observed_types += 1
        for _, name in sorted(outputs):
            kind = block.env_out.get(name)
            mutated = any(name == n for n, _ in block.inputs) and not any(
                lo <= a <= hi for a in self.locals[name].assigns)
            if mutated:
                kind = dict(block.inputs).get(name)
                if kind == TENSOR:
                    continue     # tensors are shared with the ignored method
            kind = self._filled(name, block, kind)
            if kind == NUMPY:
                seen = ("no example run observed one" if not self.observed
                        else "the example runs do not tell it for this assignment")
                return (f"`{name}` is read after the block, but its value comes from numpy "
                        f"and has no known TorchScript type ({seen})")
            if kind is None or not is_complete(kind):
                return (f"cannot tell the type of `{name}`, which the block assigns and code "
                        "after it reads (no annotation, example run or static type)")
            prior = _script_default(block.env_in.get(name)) or block.env_in.get(name)
            prior = next((k for _, n, k in block.declare if n == name), prior)
            if (prior is not None and prior != NUMPY and is_complete(prior) and prior != kind
                    and prior != f"Optional[{kind}]"):
                return (f"`{name}` changes type in the block ({prior} -> {kind}); TorchScript "
                        "gives a variable one type")
            block.outputs.append((name, kind))
            if name in self.from_observation:
                block.observed_types += 1
        if block.returns:
            kind = self._return_type(block)
            if kind is None:
                return "cannot tell the type the block returns"
            block.return_type = kind
        for stmt in block.stmts:
            for target in find_all(stmt, cst.AssignTarget, cst.AugAssign, cst.AnnAssign):
                attr = self_attr(target.target, self.self_var)
                if attr is not None and attr not in block.attributes_set:
                    block.attributes_set.append(attr)
        return None

    def _sole_empty_init(self, name: str, local_before: int) -> cst.SimpleStatementLine | None:
        """The line ``name = []`` (or ``{}``) when it is the only assignment of ``name`` in
        the method and comes before ``local_before``."""
        local = self.locals.get(name)
        if local is None or len(local.assigns) != 1 or local.assigns[0] >= local_before:
            return None
        lines: list[cst.SimpleStatementLine] = find_all(self.func.body, cst.SimpleStatementLine)
        for line in lines:
            if (_empty_container_name(line) == name
                    and self.start[id(line)] <= local.assigns[0] <= self.end[id(line)]):
                return line
        return None

    def _filled(self, name: str, block: _Block, kind: str | None) -> str | None:
        """``List[?]``/``Dict[?, ?]`` (an empty literal) completed from what the block stores
        in it: ``rows.append(torch.from_numpy(r))`` makes ``List[Tensor]``."""
        if kind is None or kind == NUMPY or is_complete(kind):
            return kind
        head, _ = parts_of(kind)
        lo, hi = self.start[id(block.stmts[0])], self.end[id(block.stmts[-1])]
        lines = [line for stmt in block.stmts
                 for line in find_all(stmt, cst.SimpleStatementLine)]
        elements: list[str | None] = []
        keys: list[str | None] = []
        for line in lines:
            self.typer.env = dict(self.env_before.get(id(line), block.env_in))
            for node in find_all(line, cst.Call, cst.AssignTarget):
                if not lo <= self.start[id(node)] <= hi:
                    continue
                if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                        and _is_name(node.func.value, name) and node.args
                        and node.func.attr.value in ("append", "insert")):
                    elements.append(self.typer.type_of(node.args[-1].value))
                elif (isinstance(node, cst.AssignTarget) and isinstance(node.target,
                                                                        cst.Subscript)
                      and _is_name(node.target.value, name)
                      and len(node.target.slice) == 1
                      and isinstance(node.target.slice[0].slice, cst.Index)):
                    keys.append(self.typer.type_of(node.target.slice[0].slice.value))
                    assign = next(a for a in find_all(line, cst.Assign) if node in a.targets)
                    elements.append(self.typer.type_of(assign.value))
        element = _unify_all(elements)
        if head == "List" and element is not None and not keys:
            kind = unify(kind, f"List[{element}]")
        elif head == "Dict" and element is not None:
            key = _unify_all(keys)
            kind = unify(kind, f"Dict[{key}, {element}]") if key else None
        return kind

    def _return_type(self, block: _Block) -> str | None:
        if self.func.returns is not None:
            kind = type_from_annotation(self.func.returns.annotation)
            return kind if kind is not None and is_complete(kind) else None
        last = block.stmts[-1]
        assert isinstance(last, cst.SimpleStatementLine)
        value = next(s.value for s in last.body if isinstance(s, cst.Return))
        if value is None:
            return "None"
        self.typer.env = dict(self.env_before[id(last)])
        kind = self.typer.type_of(value)
        if kind is not None and kind != NUMPY and is_complete(kind):
            return kind
        if len(_own(self.func.body, cst.Return)) == 1:
            seen = _observation(self.observed.get("return"))
            if seen is not None and seen != "None" and is_complete(seen):
                block.observed_types += 1
                return seen
        return None

    def _import_lines(self, name: str) -> list[cst.SimpleStatementLine]:
        lines = []
        for line in find_all(self.func.body, cst.SimpleStatementLine):
            if _is_import_line(line) and name in _bound_by_import(line):
                lines.append(line)
        return lines

    # -- the rewrite -----------------------------------------------------------------------------

    def apply(self, blocks: list[_Block]) -> tuple[cst.FunctionDef, list[cst.FunctionDef]]:
        by_first = {id(b.stmts[0]): b for b in blocks}
        moved = {id(s) for b in blocks for s in b.stmts}
        # A numpy import inside the method goes with the blocks that read it, and leaves the
        # method when nothing else reads it.
        dropped: set[int] = set()
        ranges = [(self.start[id(b.stmts[0])], self.end[id(b.stmts[-1])]) for b in blocks]
        for line in find_all(self.func.body, cst.SimpleStatementLine):
            if not _is_import_line(line) or id(line) in moved:
                continue
            names = _bound_by_import(line)
            reads = [r for n in names for r in self.locals.get(n, _Local()).reads]
            if all(any(a <= r <= b for a, b in ranges) for r in reads):
                dropped.add(id(line))
        declared: dict[int, cst.SimpleStatementLine] = {}
        for block in blocks:
            for line, name, kind in block.declare:
                assign = line.body[0]
                assert isinstance(assign, cst.Assign)
                declared[id(line)] = line.with_changes(body=[cst.AnnAssign(
                    target=cst.Name(name), annotation=self.rule.annotation(kind),
                    value=assign.value)])
        func = self.func.visit(_ReplaceRuns(by_first, moved, dropped, declared, self._call))
        assert isinstance(func, cst.FunctionDef)
        return func, [self._new_method(b) for b in blocks]

    def _call(self, block: _Block, first: cst.BaseStatement) -> cst.SimpleStatementLine:
        assert isinstance(first, cst.SimpleStatementLine | cst.BaseCompoundStatement)
        args = ", ".join(name for name, _ in block.inputs)
        call = f"{self.self_var}.{block.name}({args})"
        if block.returns:
            code = f"return {call}"
        elif not block.outputs:
            code = call
        else:
            code = f"{', '.join(name for name, _ in block.outputs)} = {call}"
        line = cst.parse_statement(code + "\n")
        assert isinstance(line, cst.SimpleStatementLine)
        return line.with_changes(leading_lines=first.leading_lines)

    def _new_method(self, block: _Block) -> cst.FunctionDef:
        params = [cst.Param(cst.Name(self.self_var))]
        params += [cst.Param(cst.Name(name), self.rule.annotation(kind))
                   for name, kind in block.inputs]
        if block.returns:
            returns = block.return_type or "None"
        elif len(block.outputs) == 1:
            returns = block.outputs[0][1]
        elif block.outputs:
            returns = f"Tuple[{', '.join(kind for _, kind in block.outputs)}]"
        else:
            returns = "None"
        stmts: list[cst.BaseStatement] = [cst.parse_statement(DOCSTRING + "\n")]
        stmts += [line.with_changes(leading_lines=()) for line in _unique(block.imports)]
        stmts.append(block.stmts[0].with_changes(leading_lines=()))
        stmts.extend(block.stmts[1:])
        if block.outputs and not block.returns:
            names = ", ".join(name for name, _ in block.outputs)
            stmts.append(cst.parse_statement(f"return {names}\n"))
        assert self.rule.decorator is not None
        return cst.FunctionDef(
            name=cst.Name(block.name),
            params=cst.Parameters(params=params),
            body=cst.IndentedBlock(body=stmts),
            decorators=[cst.Decorator(cst.parse_expression(self.rule.decorator))],
            returns=self.rule.annotation(returns),
            leading_lines=[cst.EmptyLine(indent=False)],
        )


class _ReplaceRuns(cst.CSTTransformer):
    """Each block's statements become one call; dropped import lines go."""

    def __init__(self, by_first: Mapping[int, _Block], moved: set[int], dropped: set[int],
                 declared: Mapping[int, cst.SimpleStatementLine], call: object) -> None:
        self.by_first = by_first
        self.moved = moved
        self.dropped = dropped
        self.declared = declared
        self.call = call

    def leave_IndentedBlock(self, original: cst.IndentedBlock,
                            updated: cst.IndentedBlock) -> cst.IndentedBlock:
        if not any(id(s) in self.moved or id(s) in self.dropped or id(s) in self.declared
                   for s in original.body):
            return updated
        body: list[cst.BaseStatement] = []
        for old, new in zip(original.body, updated.body, strict=True):
            block = self.by_first.get(id(old))
            if block is not None:
                body.append(self.call(block, old))  # type: ignore[operator]
            elif id(old) in self.moved or id(old) in self.dropped:
                continue
            elif id(old) in self.declared:
                body.append(self.declared[id(old)])
            else:
                body.append(new)
        if not body:
            body.append(cst.SimpleStatementLine([cst.Pass()]))
        return updated.with_changes(body=body)


# ---- typing ------------------------------------------------------------------------------------

class _NumpyTyper(Typer):
    """The static Typer, with numpy in mind: a numpy expression or a variable holding a numpy
    value has no type (Typer would call ``x.numpy()`` a Tensor), and ``self.m(...)`` has the
    return annotation of method ``m``."""

    def __init__(self, method: _MethodRewriter) -> None:
        owner = method.owner
        super().__init__({}, method.rule.imports, method.self_var, owner.attributes,
                         owner.layers)
        self.method = method
        # ``torch.from_numpy(a)`` is a Tensor; ``.numpy()`` calls and numpy names are not typed.
        self.numpy_nodes = {id(method.nodes[p]) for p in method.use_positions
                            if id(method.nodes[p]) not in method.from_numpy}
        self.returns = {name: type_from_annotation(f.returns.annotation)
                        for name, f in owner.methods.items() if f.returns is not None}

    def type_of(self, node: cst.BaseExpression) -> str | None:
        if id(node) in self.numpy_nodes:
            return None
        if isinstance(node, cst.Name) and self.env.get(node.value) == NUMPY:
            return None
        if isinstance(node, cst.Call):
            attr = self_attr(node.func, self.self_var or "self")
            if attr is not None and attr in self.returns:
                return self.returns[attr]
            # Typer takes every torch.* function for a Tensor; these are not.
            qualified = qualified_name(node.func, dict(self.imports)) or ""
            if qualified.startswith(_NOT_TENSOR_PREFIXES):
                return None
        kind = super().type_of(node)
        return None if kind == NUMPY else kind


def _merge(a: Env, b: Env) -> Env:
    """Types where two paths meet; a numpy value on either path is a numpy value."""
    merged: Env = {}
    for name in a.keys() | b.keys():
        if name in a and name in b:
            x, y = a[name], b[name]
            if x == NUMPY or y == NUMPY:
                merged[name] = NUMPY
            elif x == y:
                merged[name] = x
            else:
                merged[name] = unify(x, y)
        else:
            merged[name] = a[name] if name in a else b[name]
    return merged


def _script_default(kind: str | None) -> str | None:
    """What TorchScript makes of an unannotated empty literal typed ``List[?]``/``Dict[?, ?]``
    (None for any other type)."""
    if kind is None or kind == NUMPY or is_complete(kind):
        return None
    head, _ = parts_of(kind)
    return {"List": "List[Tensor]", "Dict": "Dict[str, Tensor]"}.get(head)


def _unify_all(kinds: list[str | None]) -> str | None:
    if not kinds or any(k is None or k == NUMPY for k in kinds):
        return None
    result: str | None = kinds[0]
    for kind in kinds[1:]:
        result = unify(result, kind)
    return result


def _empty_container_name(stmt: cst.BaseStatement) -> str | None:
    """``name`` for a line ``name = []`` / ``{}`` / ``list()`` / ``dict()``."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Assign) and len(stmt.body[0].targets) == 1):
        return None
    assign = stmt.body[0]
    target, value = assign.targets[0].target, assign.value
    empty = ((isinstance(value, cst.List | cst.Dict) and not value.elements)
             or (isinstance(value, cst.Call) and not value.args
                 and get_full_name_for_node(value.func) in ("list", "dict")))
    return target.value if empty and isinstance(target, cst.Name) else None


def _is_name(node: cst.CSTNode | None, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _observation(kind: str | None) -> str | None:
    if kind is None:
        return None
    return re.sub(r"\bNoneType\b", "None", kind)


# ---- statements --------------------------------------------------------------------------------

def find_all_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Direct children of ``node`` (in source order), read from its dataclass fields."""
    found: list[cst.CSTNode] = []
    for name in _fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif isinstance(value, tuple | list):
            found.extend(v for v in value if isinstance(v, cst.CSTNode))
    return found


_FIELDS: dict[type, tuple[str, ...]] = {}
_TRIVIA = ("whitespace", "lpar", "rpar", "comma", "semicolon", "leading_lines", "header",
           "footer", "lines_after", "trailing_whitespace", "colon", "equal", "dot", "star",
           "asynchronous")


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(kind)
                      if not f.name.startswith(_TRIVIA) or f.name == "operator")
        _FIELDS[kind] = names
    return names


def _own(body: cst.CSTNode, *kinds: type[cst.CSTNode]) -> list[cst.CSTNode]:
    """Nodes of ``kinds`` in ``body`` outside nested functions, lambdas and classes."""
    nested: set[int] = set()
    for inner in find_all(body, cst.FunctionDef, cst.Lambda, cst.ClassDef):
        if inner is not body:
            nested.update(id(n) for n in find_all(inner, *kinds))
    return [n for n in find_all(body, *kinds) if id(n) not in nested]


def _escape(stmt: cst.CSTNode) -> str | None:
    """Why control would leave ``stmt`` other than by falling through, if it would."""
    if _own(stmt, cst.Return):
        return "it contains `return`"

    def leaves(node: cst.CSTNode, in_loop: bool) -> bool:
        if isinstance(node, cst.Break | cst.Continue):
            return not in_loop
        if isinstance(node, cst.FunctionDef | cst.Lambda | cst.ClassDef):
            return False
        if isinstance(node, cst.For | cst.While):
            return (leaves(node.body, True)
                    or (node.orelse is not None and leaves(node.orelse, in_loop)))
        return any(leaves(child, in_loop) for child in find_all_children(node))

    if leaves(stmt, False):
        return "it contains `break`/`continue` that leave it"
    return None


def _definitely_assigned(stmt: cst.BaseStatement) -> set[str]:
    """Names a statement always binds when it completes normally: assignment targets, the
    body of a ``with``, both branches of an ``if``/``else``, a ``try`` body and every
    handler. Loops may not run, so they bind nothing for sure."""
    names: set[str] = set()
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    _target_names(target.target, names)
            elif (isinstance(small, cst.AnnAssign) and small.value is not None) or isinstance(
                    small, cst.AugAssign):
                _target_names(small.target, names)
        return names
    if isinstance(stmt, cst.With):
        return _suite_assigned(stmt.body)
    if isinstance(stmt, cst.If):
        if stmt.orelse is None:
            return names
        other = (_definitely_assigned(stmt.orelse) if isinstance(stmt.orelse, cst.If)
                 else _suite_assigned(stmt.orelse.body))
        return _suite_assigned(stmt.body) & other
    if isinstance(stmt, cst.Try):
        found = _suite_assigned(stmt.body)
        if stmt.orelse is not None:
            found |= _suite_assigned(stmt.orelse.body)
        for handler in stmt.handlers:
            found &= _suite_assigned(handler.body)
        if stmt.finalbody is not None:
            found |= _suite_assigned(stmt.finalbody.body)
        return found
    return names


def _suite_assigned(body: cst.BaseSuite) -> set[str]:
    names: set[str] = set()
    if isinstance(body, cst.IndentedBlock):
        for stmt in body.body:
            names |= _definitely_assigned(stmt)
    return names


def _target_names(target: cst.BaseExpression, names: set[str]) -> None:
    if isinstance(target, cst.Name):
        names.add(target.value)
    elif isinstance(target, cst.Tuple | cst.List):
        for element in target.elements:
            _target_names(element.value, names)
    elif isinstance(target, cst.StarredElement):
        _target_names(target.value, names)


def _imports_numpy(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Import):
        return all(is_numpy_name(get_full_name_for_node(a.name)) for a in node.names)
    if isinstance(node, cst.ImportFrom):
        return (node.module is not None and not node.relative
                and is_numpy_name(get_full_name_for_node(node.module)))
    return False


def _is_import_line(line: cst.SimpleStatementLine) -> bool:
    return bool(line.body) and all(_imports_numpy(s) for s in line.body)


def _bound_by_import(line: cst.SimpleStatementLine) -> set[str]:
    names: set[str] = set()
    for small in line.body:
        if isinstance(small, cst.Import | cst.ImportFrom) and not isinstance(
                small.names, cst.ImportStar):
            for alias in small.names:
                if alias.asname is not None:
                    names.add(get_full_name_for_node(alias.asname.name) or "")
                else:
                    names.add((get_full_name_for_node(alias.name) or "").split(".")[0])
    return names


def _unique(lines: Iterable[cst.SimpleStatementLine]) -> list[cst.SimpleStatementLine]:
    seen: set[int] = set()
    found = []
    for line in lines:
        if id(line) not in seen:
            seen.add(id(line))
            found.append(line)
    return found


def _not_compiled(func: cst.FunctionDef) -> bool:
    for decorator in func.decorators:
        target = decorator.decorator
        if isinstance(target, cst.Call):
            target = target.func
        name = get_full_name_for_node(target) or ""
        if name.endswith(_IGNORED_DECORATORS) or name in _NOT_COMPILED_DECORATORS:
            return True
    return False


def _is_exported(func: cst.FunctionDef) -> bool:
    return any((get_full_name_for_node(d.decorator) or "").endswith("jit.export")
               for d in func.decorators)


def _method_name(block: _Block) -> str:
    """``_numpy_<what it assigns>``: outputs, returned names, attributes set."""
    names = [name for name, _ in block.outputs]
    if block.returns:
        last = block.stmts[-1]
        assert isinstance(last, cst.SimpleStatementLine)
        value = next((s.value for s in last.body if isinstance(s, cst.Return)), None)
        elements = (value.elements if isinstance(value, cst.Tuple) else [cst.Element(value)]
                    if value is not None else [])
        returned = [e.value.value for e in elements if isinstance(e.value, cst.Name)]
        names = returned if returned and len(returned) == len(elements) else [
            f"{block.method.strip('_')}_result"]
    elif not names:
        names = block.attributes_set or ["block"]
    names = [n.strip("_") or n for n in names]
    if len(names) == 1:
        joined = names[0]
    elif len(names) == 2:
        joined = f"{names[0]}_and_{names[1]}"
    elif len(names) == 3:
        joined = f"{names[0]}_{names[1]}_and_{names[2]}"
    else:
        joined = f"{names[0]}_{names[1]}_{names[2]}_and_more"
    return f"_numpy_{joined}"
