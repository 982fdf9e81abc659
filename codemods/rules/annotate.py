"""``annotate``: the type annotations and signatures TorchScript needs.

What it does
    In ``forward()`` and every method it reaches (what ``torch.jit.script`` compiles):

    * parameters with a literal default get its type (``alpha=1.0`` -> ``alpha: float = 1.0``,
      ``size=(1, 3)`` -> ``size: Tuple[int, int] = (1, 3)``);
    * ``None`` defaults become ``Optional[T]``, ``T`` from the types seen in the example calls,
      else from how the body uses the value (``x.masked_fill(mask, ...)`` is a Tensor,
      ``scale = x.size(-1) ** -0.5`` a float, ``x.topk(k)`` an int);
    * parameters without a default that are not tensors in the example calls (or whose uses
      say int/float/str) get that type; a Tensor parameter is left as it is;
    * mutable defaults: ``sizes=[1, 3]`` -> ``sizes: Tuple[int, int] = (1, 3)`` when the value
      is only read, else ``Optional[List[int]] = None`` plus ``if sizes is None: sizes = [1, 3]``;
    * keyword-only parameters become ordinary ones with the same defaults; unused ``*args`` /
      ``**kwargs`` are removed, but only with ``--unsafe-fixes``;
    * empty literals whose elements are not tensors: ``lens = []`` + ``lens.append(x.size(0))``
      -> ``lens: List[int] = []`` (``{}`` likewise, ``Dict[str, T]``);
    * return annotations where the returns disagree (int vs float, ``[]`` vs ``[n]``);
    * module attributes: an empty list/dict attribute read in forward gets a class-level
      annotation (``ids: List[int]``); an attribute that may be None and is tested with
      ``is not None`` inside an ``and``/``or`` (or already declared ``Optional``) gets the
      ``Optional`` declaration and is copied to a local that the test refines;
    * tensor-valued elements of an integer list (``F.pad(x, [0, maxlen - n])`` with
      ``maxlen = lengths.max()``) are wrapped in ``int(...)``.

    ``typing`` names are imported once, merged into the file's ``from typing import``.

Why it breaks export
    TorchScript types every unannotated parameter as ``Tensor``: ``alpha=1.0`` fails at script
    time ("Expected a default value of type Tensor"), ``k`` called with an int fails at call time,
    and ``scale=None`` scripts but ``scale is not None`` folds to True. ``None`` defaults need
    ``Optional``; mutable defaults, keyword-only parameters, ``*args`` and ``**kwargs`` are
    rejected; ``[]`` is ``List[Tensor]`` and ``{}`` ``Dict[str, Tensor]``; mixed returns and
    empty-list attributes cannot be typed; an Optional attribute cannot be refined in place.

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

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import (
    find_all,
    import_map,
    methods_of,
    module_class_names,
    names_used,
    parameters_of,
    qualified_name,
    reachable_methods,
    registered_names,
    self_attr,
    self_name,
)
from tsfix.codemods.facts.value_types import (
    EMPTY_DICT,
    EMPTY_LIST,
    TENSOR,
    Typer,
    annotation_text,
    collect_locals,
    is_complete,
    is_tensor_layer,
    parts_of,
    type_from_annotation,
    typing_names,
    unify,
    unify_all,
    without_none,
)
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

_IGNORED_DECORATORS = ("torch.jit.ignore", "torch.jit.unused", "jit.ignore", "jit.unused")
# Methods of lists, dicts and str: a parameter used with one of these is not a Tensor.
_CONTAINER_METHODS = {"append", "extend", "insert", "pop", "remove", "index", "count", "copy",
                      "items", "keys", "values", "get", "update", "setdefault", "startswith",
                      "endswith", "lower", "upper", "strip", "format", "join", "split",
                      "replace", "sort", "reverse", "clear", "__len__"}
_NOT_TENSOR = "<not a Tensor>"
# Tensor methods whose positional arguments are ints (all of them, or the listed positions).
_INT_ARGUMENTS: dict[str, tuple[int, ...] | None] = {
    "view": None, "reshape": None, "expand": None, "repeat": None, "permute": None,
    "new_zeros": None, "new_ones": None, "new_empty": None, "flip": None, "roll": None,
    "topk": (0,), "size": (0,), "unsqueeze": (0,), "squeeze": (0,), "transpose": (0, 1),
    "flatten": (0, 1), "narrow": (0, 1, 2), "chunk": (0,), "softmax": (0,),
    "log_softmax": (0,), "cumsum": (0,), "select": (0, 1), "movedim": (0, 1),
    "unfold": (0, 1, 2), "kthvalue": (0,), "argmax": (0,), "argmin": (0,), "mean": (0,),
    "sum": (0,), "amax": (0,), "amin": (0,), "logsumexp": (0,), "unflatten": (0,),
}
_INT_KEYWORDS = {"dim", "k", "dims", "chunks", "start_dim", "end_dim", "num_classes",
                 "diagonal", "dim0", "dim1", "kernel_size", "stride", "padding", "dilation",
                 "output_size", "groups", "upscale_factor", "downscale_factor"}
# (clamp's min/max and fill values take ints as well: they say nothing.)
_FLOAT_KEYWORDS = {"p", "eps", "alpha", "beta", "negative_slope", "momentum", "scale_factor",
                   "lambd", "label_smoothing", "margin"}
# Callables whose first argument is a shape: a list of ints.
_SHAPE_FUNCTIONS = {"torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.rand",
                    "torch.randn"}
_SHAPE_METHODS = {"view", "reshape", "expand", "repeat", "permute", "new_zeros", "new_ones",
                  "new_empty", "new_full"}
# torch functions whose first argument is a size, not a tensor.
_CONSTRUCTORS = {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint",
                 "tensor", "as_tensor", "linspace", "logspace", "eye", "range"}


@dataclass
class _Counts:
    observed: int = 0
    static: int = 0
    parts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Annotate(Rule):
    __doc__ = __doc__

    name = "annotate"
    # --rule all order: last: it types what is still untyped, including signatures lift-branch
    # extended.
    order = 100
    CODES = (
        Code("TSF206", "unannotated-default", "unannotated parameter with a non-Tensor default",
             "An unannotated parameter is a Tensor to TorchScript: `alpha=1.0` fails (\"Expected a "
             "default value of type Tensor\"). Annotate it (`alpha: float = 1.0`)."),
        Code("TSF207", "untyped-none-default", "unannotated parameter defaulting to None",
             "`scale=None` scripts as Optional[Tensor]: passing an int or float fails at call time "
             "and `is not None` may fold. Annotate it (`scale: Optional[float] = None`). A warning: "
             "unannotated is right when the parameter is an optional Tensor.", level="warning"),
        Code("TSF208", "none-default-not-optional", "None default on a non-Optional annotation",
             "`k: int = None` is rejected (\"Expected a default value of type int\"); the "
             "annotation must be Optional[int]."),
        Code("TSF209", "mutable-default", "mutable default argument",
             "List/dict/set defaults are rejected even when annotated (\"Mutable default "
             "parameters are not supported\"). Use a tuple, or Optional[...] = None."),
        Code("TSF210", "variadic-parameters", "*args, **kwargs or keyword-only default",
             "Compiled methods cannot take *args/**kwargs or keyword-only parameters with "
             "defaults. annotate makes keyword-only parameters ordinary and removes unused "
             "*args/**kwargs with --unsafe-fixes."),
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
            "class Block(nn.Module):\n"
            "    def forward(self, x, *, scale=1.0, **kwargs):\n"
            "        return x * scale\n",
            "import torch\nfrom torch import nn\n\n\n"
            "class Block(nn.Module):\n"
            "    def forward(self, x, scale: float = 1.0, **kwargs):\n"
            "        return x * scale\n",
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

    def prepare(self, module: cst.Module) -> None:
        self.imports = import_map(module)
        self.module_classes = module_class_names(module, self.imports)
        if self.imports.get("Tensor") == "torch.Tensor":
            self.tensor_name = "Tensor"
        else:
            alias = next((local for local, full in self.imports.items() if full == "torch"),
                         "torch")
            self.tensor_name = f"{alias}.Tensor"

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if cls.name.value not in self.module_classes:
            return cls
        return _ClassAnnotator(self, cls).rewrite()

    def annotation(self, kind: str) -> cst.Annotation:
        self.need_typing(*typing_names(kind))
        return cst.Annotation(cst.parse_expression(annotation_text(kind, self.tensor_name)))


# ---- one class ---------------------------------------------------------------------------------

class _ClassAnnotator:
    def __init__(self, rule: Annotate, cls: cst.ClassDef) -> None:
        self.rule = rule
        self.cls = cls
        self.name = cls.name.value
        self.methods = methods_of(cls)
        compiled = {n: f for n, f in self.methods.items() if not _is_ignored(f)}
        self.compiled = [n for n in reachable_methods(compiled) if n != "__init__"]
        self.observed = rule.observed.get(self.name, {})
        self.counts = _Counts()
        self.declared = _class_annotations(cls)
        self._read_attributes()

    # -- what __init__ stores on self ----------------------------------------------------------

    def _read_attributes(self) -> None:
        """Types of ``self.<attr>`` (scalars, tensors), submodules that return a Tensor, and
        the attributes that may hold None or an empty container."""
        self.attributes: dict[str, str] = {}
        self.layers: set[str] = set()
        self.maybe_none: dict[str, str | None] = {}   # attr -> type of its non-None values
        self.empty_containers: dict[str, str] = {}      # attr -> EMPTY_LIST / EMPTY_DICT
        init = self.methods.get("__init__")
        if init is None:
            return
        self_var = self_name(init) or "self"
        typer = Typer({}, self.rule.imports, None)
        values: dict[str, list[str | None]] = {}
        for assign in find_all(init.body, cst.Assign, cst.AnnAssign):
            targets = ([t.target for t in assign.targets] if isinstance(assign, cst.Assign)
                       else [assign.target])
            for target in targets:
                attr = self_attr(target, self_var)
                if attr is None or assign.value is None:
                    continue
                values.setdefault(attr, []).extend(self._stored_types(assign.value, typer))
                if isinstance(assign.value, cst.Call) and is_tensor_layer(
                        qualified_name(assign.value.func, self.rule.imports)):
                    self.layers.add(attr)
        for call in find_all(init.body, cst.Call):
            if (self_attr(call.func, self_var) is not None and len(call.args) >= 2
                    and call.func.attr.value in ("register_buffer", "register_parameter")
                    and isinstance(call.args[0].value, cst.SimpleString)):
                named = call.args[0].value.evaluated_value
                if isinstance(named, str):
                    stored = self._stored_types(call.args[1].value, typer, tensor=True)
                    values.setdefault(named, []).extend(stored)
        for attr in registered_names(init):
            values.setdefault(attr, [])
        for attr, kinds in values.items():
            non_none = [k for k in kinds if k != "None"]
            if "None" in kinds:
                self.maybe_none[attr] = unify_all(non_none) if non_none else None
            elif kinds and all(k in (EMPTY_LIST, EMPTY_DICT) or
                               (k is not None and k.startswith(("List[", "Dict[")))
                               for k in kinds) and any(k in (EMPTY_LIST, EMPTY_DICT)
                                                       for k in kinds):
                self.empty_containers[attr] = unify_all(kinds) or kinds[0]  # type: ignore[assignment]
            elif kinds and attr not in self.maybe_none:
                kind = unify_all(kinds)
                if kind is not None and "?" not in kind:
                    self.attributes[attr] = kind

    def _stored_types(self, value: cst.BaseExpression, typer: Typer,
                      tensor: bool = False) -> list[str | None]:
        if isinstance(value, cst.IfExp):
            return (self._stored_types(value.body, typer, tensor)
                    + self._stored_types(value.orelse, typer, tensor))
        if isinstance(value, cst.Name) and value.value == "None":
            return ["None"]
        if isinstance(value, cst.Call):
            name = qualified_name(value.func, self.rule.imports) or ""
            if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter") or (
                    name.startswith("torch.") and name.rpartition(".")[2][:1].islower()
                    and name.count(".") == 1):
                return [TENSOR]
        if tensor:
            return [TENSOR]
        return [typer.type_of(value)]

    # -- the rewrite ---------------------------------------------------------------------------

    def rewrite(self) -> cst.ClassDef:
        if not self.compiled:
            return self.cls
        class_lines: list[str] = []
        local_copies = self._optional_attribute_plan(class_lines)
        self._empty_attribute_plan(class_lines)
        new_methods: dict[str, cst.FunctionDef] = {}
        for name in self.compiled:
            func = self.methods[name]
            rewritten = _MethodAnnotator(self, name, func, local_copies.get(name, {})).rewrite()
            if rewritten is not func:
                new_methods[name] = rewritten
        if not new_methods and not class_lines:
            return self.cls
        if not isinstance(self.cls.body, cst.IndentedBlock):
            return self.cls
        body: list[cst.BaseStatement] = [
            new_methods.get(s.name.value, s) if isinstance(s, cst.FunctionDef) else s
            for s in self.cls.body.body]
        if class_lines:
            at = 1 if _has_docstring(body) else 0
            rest = body[at:]
            if rest:
                # A blank line still separates the declarations from what follows them.
                rest[0] = rest[0].with_changes(leading_lines=rest[0].leading_lines  # type: ignore[attr-defined]
                                               or (cst.EmptyLine(),))
            body = [*body[:at], *(cst.parse_statement(line) for line in class_lines), *rest]
        new_cls = self.cls.with_changes(body=self.cls.body.with_changes(body=body))
        counts = self.counts
        parts = list(counts.parts)
        if counts.observed or counts.static:
            parts.insert(0, f"typed {counts.observed + counts.static} parameter(s) "
                         f"({counts.observed} from observed calls, {counts.static} from "
                         "the code)")
        summary = "; ".join(parts)
        self.rule.changes.append(ClassChange(self.rule.name, self.name,
                                             self.rule.span_of(self.cls), summary,
                                             notes=counts.notes))
        return new_cls

    def _optional_attribute_plan(self, class_lines: list[str]) -> dict[str, dict[str, str]]:
        """method -> {attr: local name} for Optional attributes refined in that method."""
        plan: dict[str, dict[str, str]] = {}
        for attr in sorted(set(self.maybe_none) | {a for a, k in self.declared.items()
                                                   if k and k.startswith("Optional[")}):
            if attr in self.layers:
                continue
            declared = self.declared.get(attr)
            tested, needed, plain_reads = [], False, False
            for name in self.compiled:
                func = self.methods[name]
                self_var = self_name(func) or "self"
                reads = [a for a in find_all(func.body, cst.Attribute)
                         if self_attr(a, self_var) == attr]
                if not reads:
                    continue
                tests = _none_tests(func.body, self_var, attr)
                if not tests:
                    plain_reads = True
                    continue
                tested.append(name)
                if declared is not None or any(in_chain for in_chain in tests.values()):
                    needed = True
                if _assigns_attr(func, self_var, attr):
                    plain_reads = True
            if not needed:
                continue
            where = self.methods[tested[0]]
            if plain_reads:
                self.rule.skip(self.name, where, f"self.{attr} may be None and is read without "
                               "an `is not None` test in a compiled method (or assigned "
                               "there); not refined")
                continue
            kind = self.maybe_none.get(attr)
            if declared is None:
                if kind is None or not is_complete(kind):
                    self.rule.skip(self.name, where, f"self.{attr} may be None, but the type "
                                   "of its other values is unknown; not declared Optional")
                    continue
                optional = f"Optional[{without_none(kind)}]"
                self.rule.need_typing(*typing_names(optional))
                class_lines.append(
                    f"{attr}: {annotation_text(optional, self.rule.tensor_name)}")
                self.counts.parts.append(f"declared self.{attr} {optional}")
            for name in tested:
                used = names_used(self.methods[name])
                local = attr if attr not in used else f"{attr}_value"
                plan.setdefault(name, {})[attr] = local
            self.counts.parts.append(f"refined self.{attr} through a local")
        return plan

    def _empty_attribute_plan(self, class_lines: list[str]) -> None:
        for attr, kind in sorted(self.empty_containers.items()):
            if attr in self.declared or not self._read_in_compiled(attr):
                continue
            element_types = []
            for func in self.methods.values():
                self_var = self_name(func) or "self"
                typer = _method_typer(self, func)
                for call in find_all(func.body, cst.Call):
                    if (isinstance(call.func, cst.Attribute)
                            and self_attr(call.func.value, self_var) == attr
                            and call.func.attr.value in ("append", "insert") and call.args):
                        element_types.append(typer.type_of(call.args[-1].value))
            element = unify_all(element_types) if element_types else None
            full = unify(kind, f"List[{element}]") if element else kind
            if full is None or not is_complete(full):
                self.rule.skip(self.name, self.cls, f"self.{attr} starts empty and its element "
                               "type is unknown; TorchScript cannot type it (annotate it at "
                               "class level)")
                continue
            if full in ("List[Tensor]", "Dict[str, Tensor]"):
                continue
            self.rule.need_typing(*typing_names(full))
            class_lines.append(f"{attr}: {annotation_text(full, self.rule.tensor_name)}")
            self.counts.parts.append(f"declared self.{attr} {full}")

    def _read_in_compiled(self, attr: str) -> bool:
        for name in self.compiled:
            func = self.methods[name]
            self_var = self_name(func) or "self"
            if any(self_attr(a, self_var) == attr for a in find_all(func.body, cst.Attribute)):
                return True
        return False


# ---- one method --------------------------------------------------------------------------------

class _MethodAnnotator:
    def __init__(self, owner: _ClassAnnotator, name: str, func: cst.FunctionDef,
                 local_copies: dict[str, str]) -> None:
        self.owner = owner
        self.rule = owner.rule
        self.name = name
        self.func = func
        self.self_var = self_name(func)
        self.observed = owner.observed.get(name, {})
        self.local_copies = local_copies
        self.prologue: list[str] = []
        self.replacements: dict[int, cst.CSTNode] = {}
        self.typer = _method_typer(owner, func)
        self.param_types: dict[str, str] = {}
        self.decided: dict[str, str] = {}   # empty literals typed so far

    def skip(self, node: cst.CSTNode, reason: str) -> None:
        self.rule.skip(self.owner.name, node, f"{self.name}(): {reason}")

    def rewrite(self) -> cst.FunctionDef:
        # Empty literals first: a parameter's default may be filled from one (max(lengths)).
        self._empty_literals()
        params = self._parameters()
        # Then the locals again, now that the parameters have their types.
        self.typer = _method_typer(self.owner, self.func, self.param_types)
        self.typer.env.update(self.decided)
        self._empty_literals()
        self._integer_lists()
        returns = self._returns()
        changed = (params is not self.func.params or returns is not None or self.prologue
                   or self.replacements or self.local_copies)
        if not changed:
            return self.func
        func = self.func
        if self.replacements or self.local_copies:
            func = func.visit(_Replace(self.replacements, self.self_var or "self",
                                       self.local_copies))  # type: ignore[assignment]
        for attr, local in self.local_copies.items():
            self.prologue.append(f"{local} = {self.self_var}.{attr}")
        if self.prologue:
            func = func.with_changes(body=_prepend(func.body, self.prologue))
        func = func.with_changes(params=params)
        if returns is not None:
            func = func.with_changes(returns=self.rule.annotation(returns))
            self.owner.counts.parts.append(f"{self.name}() returns {returns}")
        return func

    # -- signature -----------------------------------------------------------------------------

    def _parameters(self) -> cst.Parameters:
        p = self.func.params
        positional = list(p.params)
        first_is_self = self.self_var is not None
        if first_is_self:
            if p.posonly_params:
                posonly = list(p.posonly_params)[1:]
            else:
                posonly = []
                positional = positional[1:]
        else:
            posonly = list(p.posonly_params)
        kwonly = list(p.kwonly_params)
        star_arg, star_kwarg = p.star_arg, p.star_kwarg
        changed = False
        used = names_used(self.func.body)

        if isinstance(star_arg, cst.Param) or isinstance(star_kwarg, cst.Param):
            for star, stars in ((star_arg, "*"), (star_kwarg, "**")):
                if not isinstance(star, cst.Param):
                    continue
                label = f"{stars}{star.name.value}"
                if star.name.value in used:
                    self.skip(star, f"reads {label}, which TorchScript cannot compile; make "
                              "what it carries explicit parameters")
                elif self.rule.unsafe_fixes:
                    if stars == "*":
                        star_arg = cst.ParamStar() if kwonly else cst.MaybeSentinel.DEFAULT
                    else:
                        star_kwarg = None
                    changed = True
                    self.owner.counts.parts.append(f"removed unused {label}")
                    self.owner.counts.notes.append(
                        f"unsafe fix: removed unused {label} from {self.name}(); callers "
                        "that passed extra arguments now get a TypeError")
                else:
                    self.skip(star, f"{label} is never read, but TorchScript rejects it; "
                              "removing it changes what callers may pass (--unsafe-fixes "
                              "removes it)")
        if kwonly and not isinstance(star_arg, cst.Param):
            defaults_before = any(q.default is not None for q in [*posonly, *positional])
            if all(q.default is not None for q in kwonly) or not defaults_before:
                positional = [*positional, *kwonly]
                kwonly = []
                star_arg = cst.MaybeSentinel.DEFAULT
                changed = True
                self.owner.counts.parts.append(f"made {self.name}()'s keyword-only "
                                               "parameters ordinary")
            else:
                self.skip(kwonly[0], "keyword-only parameters without defaults follow "
                          "parameters with defaults; they cannot become ordinary parameters")

        typed: list[cst.Param] = []
        for param in [*posonly, *positional, *kwonly]:
            new = self._parameter(param)
            changed = changed or new is not param
            typed.append(new)
        if not changed:
            return p
        new_posonly = typed[:len(posonly)]
        new_positional = typed[len(posonly):len(posonly) + len(positional)]
        new_kwonly = typed[len(posonly) + len(positional):]
        if first_is_self:
            if p.posonly_params:
                new_posonly = [p.posonly_params[0], *new_posonly]
            else:
                new_positional = [p.params[0], *new_positional]
        if not new_kwonly and not isinstance(star_arg, cst.Param | cst.ParamStar) and \
                not isinstance(star_kwarg, cst.Param):
            new_positional = _without_trailing_comma(new_positional)
        return p.with_changes(posonly_params=new_posonly, params=new_positional,
                              kwonly_params=new_kwonly, star_arg=star_arg,
                              star_kwarg=star_kwarg)

    def _parameter(self, param: cst.Param) -> cst.Param:
        name = param.name.value
        if param.annotation is not None:
            return param
        observed = _from_observation(self.observed.get(name))
        default = param.default
        if default is None:
            return self._required(param, observed)
        if isinstance(default, cst.Name) and default.value == "None":
            return self._none_default(param, observed)
        if isinstance(default, cst.List | cst.Dict):
            return self._mutable_default(param, observed)
        literal = self.typer.type_of(default)
        if literal is None or not is_complete(literal) or literal == TENSOR:
            self.skip(param, f"cannot tell the type of {name}'s default "
                      f"`{cst.Module([]).code_for_node(default)}`; left unannotated")
            return param
        kind = literal
        if observed is not None and without_none(observed):
            widened = unify(literal, without_none(observed))
            if widened is not None and widened != literal:
                kind = widened
                self.owner.counts.observed += 1
            else:
                self.owner.counts.static += 1
        else:
            self.owner.counts.static += 1
        self.param_types[name] = kind
        return self._annotated(param, kind)

    def _required(self, param: cst.Param, observed: str | None) -> cst.Param:
        name = param.name.value
        static = self._usage_type(name, weak=False)
        if observed is not None:
            if observed == TENSOR or observed == "None" or not is_complete(observed):
                return param
            self.owner.counts.observed += 1
            kind = observed
        elif static is not None and static != TENSOR and is_complete(static):
            self.owner.counts.static += 1
            kind = static
        else:
            return param
        self.param_types[name] = kind
        return self._annotated(param, kind)

    def _none_default(self, param: cst.Param, observed: str | None) -> cst.Param:
        name = param.name.value
        seen = without_none(observed) if observed else None
        static = self._usage_type(name)
        if seen is not None and is_complete(seen):
            inner = seen
            self.owner.counts.observed += 1
        elif static is not None and is_complete(static):
            inner = static
            self.owner.counts.static += 1
        else:
            self.skip(param, f"{name}=None: neither its uses nor an example call tell its "
                      "type; left unannotated (TorchScript takes it for a Tensor)")
            return param
        kind = f"Optional[{inner}]"
        self.param_types[name] = kind
        return self._annotated(param, kind)

    def _mutable_default(self, param: cst.Param, observed: str | None) -> cst.Param:
        name = param.name.value
        default = param.default
        assert default is not None
        literal = self.typer.type_of(default)
        kind = unify(literal, without_none(observed)) if observed and without_none(observed) \
            else literal
        if kind is not None and not is_complete(kind):
            elements, keys = self._stored_in(name)
            element, key = unify_all(elements), unify_all(keys)
            if isinstance(default, cst.List) and element:
                kind = unify(kind, f"List[{element}]")
            elif isinstance(default, cst.Dict) and element and key:
                kind = unify(kind, f"Dict[{key}, {element}]")
        if kind is None or not is_complete(kind):
            self.skip(param, f"{name}: a mutable default whose element type is unknown; "
                      "left as it is")
            return param
        source = "observed" if observed else "static"
        setattr(self.owner.counts, source, getattr(self.owner.counts, source) + 1)
        head, args = parts_of(kind)
        if (head == "List" and isinstance(default, cst.List) and default.elements
                and self._only_read(name)):
            as_tuple = f"Tuple[{', '.join([args[0]] * len(default.elements))}]"
            tuple_default = cst.Tuple([cst.Element(e.value) for e in default.elements])
            self.param_types[name] = as_tuple
            return self._annotated(param.with_changes(default=tuple_default), as_tuple)
        code = cst.Module([]).code_for_node(default)
        self.prologue.append(f"if {name} is None:\n    {name} = {code}")
        optional = f"Optional[{kind}]"
        self.param_types[name] = kind
        return self._annotated(param.with_changes(default=cst.Name("None")), optional)

    def _annotated(self, param: cst.Param, kind: str) -> cst.Param:
        return param.with_changes(annotation=self.rule.annotation(kind),
                                  equal=cst.MaybeSentinel.DEFAULT)

    def _only_read(self, name: str) -> bool:
        """True when ``name`` is only iterated, indexed, measured or passed on: then a tuple
        behaves like the list in eager mode too."""
        body = self.func.body
        allowed: set[int] = set()
        for node in find_all(body, cst.For, cst.Subscript, cst.Call, cst.Arg, cst.Element,
                             cst.Assign, cst.AugAssign, cst.Attribute):
            if isinstance(node, cst.For) and _is_name(node.iter, name):
                allowed.add(id(node.iter))
            elif isinstance(node, cst.Subscript | cst.Arg) and _is_name(node.value, name) and \
                    not (isinstance(node, cst.Arg) and node.star):
                allowed.add(id(node.value))
        for target in find_all(body, cst.AssignTarget):
            if any(_is_name(n, name) for n in find_all(target, cst.Name)) and \
                    not _is_name(target.target, name):
                return False
        reads = [n for n in find_all(body, cst.Name) if n.value == name]
        return all(id(n) in allowed for n in reads)

    def _usage_type(self, name: str, *, weak: bool = True) -> str | None:
        """What the body's uses of ``name`` say its type is (None: nothing, or conflicting).

        Weak evidence -- comparison with a number, arithmetic with a float, assignment -- also
        fits a Tensor (``x * 0.5``), so it only counts with ``weak=True``, for parameters whose
        None default already says they are optional options rather than inputs."""
        votes: list[str | None] = []
        body = self.func.body
        for call in find_all(body, cst.Call):
            votes.extend(self._call_votes(call, name))
        for attribute in find_all(body, cst.Attribute):
            if _is_name(attribute.value, name) and attribute.attr.value in (
                    "shape", "dtype", "device", "ndim", "T", "is_cuda", "data"):
                votes.append(TENSOR)
        for subscript in find_all(body, cst.Subscript):
            for element in subscript.slice:
                if isinstance(element.slice, cst.Slice) and any(
                        _bound_reads(bound, name) for bound in (element.slice.lower,
                                                                element.slice.upper)):
                    votes.append("int")
        if not weak:
            return _decide(votes)
        for comparison in find_all(body, cst.Comparison):
            operands = [comparison.left, *(c.comparator for c in comparison.comparisons)]
            if not any(_is_name(o, name) for o in operands):
                continue
            if any(isinstance(c.operator, cst.Is | cst.IsNot | cst.In | cst.NotIn)
                   for c in comparison.comparisons):
                continue
            for other in operands:
                kind = None if _is_name(other, name) else _literal_kind(other)
                if kind is not None:
                    votes.append(kind)
        for operation in find_all(body, cst.BinaryOperation):
            sides = (operation.left, operation.right)
            if any(_is_name(s, name) for s in sides) and not isinstance(operation.operator,
                                                                        cst.Power):
                others = [_literal_kind(s) for s in sides if not _is_name(s, name)]
                votes.extend(k for k in others if k == "float")
        for assign in find_all(body, cst.Assign):
            if any(_is_name(t.target, name) for t in assign.targets):
                kind = self.typer.type_of(assign.value)
                votes.append(kind if kind != "None" else None)
        return _decide(votes)

    def _call_votes(self, call: cst.Call, name: str) -> list[str | None]:
        votes: list[str | None] = []
        func = call.func
        positional = [a for a in call.args if a.keyword is None and not a.star]
        # name.method(...)
        if isinstance(func, cst.Attribute) and _is_name(func.value, name):
            method = func.attr.value
            votes.append(_NOT_TENSOR if method in _CONTAINER_METHODS else TENSOR)
        for arg in call.args:
            if not _is_name(arg.value, name) or arg.star:
                continue
            if arg.keyword is not None:
                keyword = arg.keyword.value
                if keyword in _INT_KEYWORDS:
                    votes.append("int")
                elif keyword in _FLOAT_KEYWORDS:
                    votes.append("float")
                continue
            index = positional.index(arg)
            callee = get_full_name_for_node(func)
            if callee == "range":
                votes.append("int")
                continue
            if isinstance(func, cst.Attribute):
                receiver = self.typer.type_of(func.value)
                method = func.attr.value
                if (self.self_var and _is_name(func.value, self.self_var)
                        and method in self.owner.layers and index == 0):
                    votes.append(TENSOR)
                elif receiver == TENSOR and method in _INT_ARGUMENTS:
                    positions = _INT_ARGUMENTS[method]
                    if positions is None or index in positions:
                        votes.append("int")
                elif receiver == TENSOR and method in ("masked_fill", "masked_fill_",
                                                       "where") and index == 0:
                    votes.append(TENSOR)
                elif receiver == TENSOR and method in ("masked_fill", "masked_fill_") and \
                        index == 1:
                    votes.append("float")
            qualified = qualified_name(func, self.rule.imports) or ""
            if qualified.startswith("torch.") and index == 0 and \
                    qualified.rpartition(".")[2] not in _CONSTRUCTORS and \
                    not qualified.rpartition(".")[2][:1].isupper():
                votes.append(TENSOR)
        # torch.cat([a, name]) and friends: list elements are tensors.
        qualified = qualified_name(func, self.rule.imports) or ""
        if (qualified in ("torch.cat", "torch.stack", "torch.concat", "torch.hstack",
                          "torch.vstack") and positional
                and isinstance(positional[0].value, cst.List | cst.Tuple)
                and any(_is_name(e.value, name) for e in positional[0].value.elements)):
            votes.append(TENSOR)
        return votes

    # -- body ----------------------------------------------------------------------------------

    def _empty_literals(self) -> None:
        empties: dict[str, list[cst.Assign]] = {}
        parameters = set(parameters_of(self.func))
        for assign in _own(self.func.body, cst.Assign):
            if (len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)
                    and assign.targets[0].target.value not in parameters
                    and isinstance(assign.value, cst.List | cst.Dict)
                    and not assign.value.elements):
                empties.setdefault(assign.targets[0].target.value, []).append(assign)
        for name, assigns in empties.items():
            if name in self.decided:
                continue
            is_list = isinstance(assigns[0].value, cst.List)
            if any(isinstance(a.value, cst.List) != is_list for a in assigns):
                continue
            elements, keys = self._stored_in(name)
            if not elements:
                continue
            element = unify_all(elements)
            if element is None or not is_complete(element):
                if TENSOR not in elements:
                    self.skip(assigns[0], f"{name} starts empty and what goes into it cannot "
                              "be typed; left as it is")
                continue
            if is_list:
                if element == TENSOR:
                    continue
                kind = f"List[{element}]"
            else:
                key = unify_all(keys) if keys else None
                if key not in ("str", "int") or (key == "str" and element == TENSOR):
                    continue
                kind = f"Dict[{key}, {element}]"
            annotation = self.rule.annotation(kind)
            for assign in assigns:
                self.replacements[id(assign)] = cst.AnnAssign(
                    target=assign.targets[0].target, annotation=annotation, value=assign.value)
            self.typer.env[name] = self.decided[name] = kind
            self.owner.counts.parts.append(f"{name}: {kind}")

    def _stored_in(self, name: str) -> tuple[list[str | None], list[str | None]]:
        """Types of the elements (and dict keys) the method puts into container ``name``."""
        elements: list[str | None] = []
        keys: list[str | None] = []
        for call in _own(self.func.body, cst.Call):
            if (isinstance(call.func, cst.Attribute) and _is_name(call.func.value, name)
                    and call.args):
                method = call.func.attr.value
                if method in ("append", "insert"):
                    elements.append(self.typer.type_of(call.args[-1].value))
                elif method == "extend":
                    extended = self.typer.type_of(call.args[0].value)
                    elements.append(parts_of(extended)[1][0] if extended and
                                    extended.startswith("List[") else None)
        for assign in _own(self.func.body, cst.Assign):
            for target in assign.targets:
                if isinstance(target.target, cst.Subscript) and _is_name(
                        target.target.value, name) and len(target.target.slice) == 1:
                    index = target.target.slice[0].slice
                    if isinstance(index, cst.Index):
                        keys.append(self.typer.type_of(index.value))
                        elements.append(self.typer.type_of(assign.value))
        for aug in _own(self.func.body, cst.AugAssign):
            if _is_name(aug.target, name):
                added = self.typer.type_of(aug.value)
                elements.append(parts_of(added)[1][0] if added and
                                added.startswith("List[") else None)
        return elements, keys

    def _integer_lists(self) -> None:
        for call in _own(self.func.body, cst.Call):
            for literal in self._shape_arguments(call):
                for element in literal.elements:
                    if isinstance(element, cst.Element) and \
                            self.typer.type_of(element.value) == TENSOR:
                        self.replacements[id(element)] = element.with_changes(
                            value=cst.Call(cst.Name("int"), [cst.Arg(element.value)]))
                        code = cst.Module([]).code_for_node(element.value)
                        self.owner.counts.parts.append(f"int({code}) in an int list")

    def _shape_arguments(self, call: cst.Call) -> list[cst.List | cst.Tuple]:
        found: list[cst.List | cst.Tuple] = []
        qualified = qualified_name(call.func, self.rule.imports) or ""
        positional = [a for a in call.args if a.keyword is None and not a.star]
        wanted: list[cst.BaseExpression] = []
        if qualified.endswith("functional.pad"):
            wanted += [a.value for a in call.args if a.keyword and a.keyword.value == "pad"]
            wanted += [positional[1].value] if len(positional) > 1 else []
        elif qualified.endswith("functional.interpolate"):
            wanted += [a.value for a in call.args if a.keyword and a.keyword.value == "size"]
        elif positional and (qualified in _SHAPE_FUNCTIONS or (
                isinstance(call.func, cst.Attribute) and call.func.attr.value in _SHAPE_METHODS
                and self.typer.type_of(call.func.value) == TENSOR)):
            wanted.append(positional[0].value)
        found.extend(w for w in wanted if isinstance(w, cst.List | cst.Tuple))
        return found

    def _returns(self) -> str | None:
        if self.func.returns is not None:
            return None
        returns = _own(self.func.body, cst.Return)
        if len(returns) < 2:
            return None
        kinds = [self.typer.type_of(r.value) if r.value is not None else "None"
                 for r in returns]
        if all(k is not None for k in kinds) and len(set(kinds)) == 1:
            return None
        unified = unify_all(kinds)
        observed = _from_observation(self.observed.get("return"))
        if (unified is None or not is_complete(unified)) and observed and is_complete(observed):
            unified = observed
        if unified is None or not is_complete(unified):
            if len({k for k in kinds if k is not None}) > 1:
                self.skip(self.func, "its returns disagree and their common type is unknown; "
                          "no return annotation")
            return None
        if len({_relaxed(k) for k in kinds if k is not None}) <= 1 and None not in kinds:
            return None  # only Tensor/None differences: TorchScript infers Optional itself
        if without_none(unified) == "float":
            # TorchScript does not widen a returned int to float.
            for node, kind in zip(returns, kinds, strict=True):
                if kind == "int" and node.value is not None:
                    value = node.value
                    widened: cst.BaseExpression = (
                        cst.Float(f"{value.value}.0") if isinstance(value, cst.Integer)
                        else cst.Call(cst.Name("float"), [cst.Arg(value)]))
                    self.replacements[id(node)] = node.with_changes(value=widened)
            self.owner.counts.notes.append(f"{self.name}() now returns float on every path, "
                                           "in eager mode too (it returned an int on some)")
        return unified


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode], self_var: str,
                 local_copies: dict[str, str]) -> None:
        self.replacements = replacements
        self.self_var = self_var
        self.local_copies = local_copies

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        replacement = self.replacements.get(id(original))
        if replacement is not None:
            if isinstance(original, cst.Element) and isinstance(updated, cst.Element):
                return updated.with_changes(value=replacement.value)  # type: ignore[attr-defined]
            if isinstance(replacement, cst.AnnAssign) and isinstance(updated, cst.Assign):
                return replacement.with_changes(value=updated.value)
            if isinstance(replacement, cst.Return) and isinstance(updated, cst.Return):
                return updated.with_changes(value=replacement.value)
            return replacement
        attr = self_attr(original, self.self_var)
        if attr is not None and attr in self.local_copies:
            return cst.Name(self.local_copies[attr])
        return updated


# ---- helpers -----------------------------------------------------------------------------------

def _is_ignored(func: cst.FunctionDef) -> bool:
    for decorator in func.decorators:
        target = decorator.decorator
        if isinstance(target, cst.Call):
            target = target.func
        name = get_full_name_for_node(target) or ""
        if name.endswith(_IGNORED_DECORATORS) or name in ("staticmethod", "classmethod",
                                                          "property"):
            return True
    return False


def _class_annotations(cls: cst.ClassDef) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    if isinstance(cls.body, cst.IndentedBlock):
        for line in cls.body.body:
            if isinstance(line, cst.SimpleStatementLine):
                for small in line.body:
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                        found[small.target.value] = type_from_annotation(
                            small.annotation.annotation)
    return found


def _method_typer(owner: _ClassAnnotator, func: cst.FunctionDef,
                  parameter_types: dict[str, str] | None = None) -> Typer:
    self_var = self_name(func)
    env: dict[str, str | None] = {}
    params = func.params
    for index, param in enumerate([*params.posonly_params, *params.params,
                                   *params.kwonly_params]):
        if index == 0 and self_var is not None:
            continue
        if param.annotation is not None:
            env[param.name.value] = type_from_annotation(param.annotation.annotation)
        elif param.default is None:
            # TorchScript assumes Tensor; believe it only where the body treats it as one, so
            # that a list parameter is not typed into List[Tensor] results.
            env[param.name.value] = TENSOR if _used_as_tensor(param.name.value, func, owner) \
                else None
        else:
            env[param.name.value] = None
    env.update(parameter_types or {})
    typer = Typer(env, owner.rule.imports, self_var, owner.attributes, owner.layers)
    collect_locals(func.body, typer)
    return typer


def _bound_reads(bound: cst.BaseExpression | None, name: str) -> bool:
    """``x[:name]``, ``x[start:start + name]``: a slice bound is an int, and so are the names
    added to or subtracted from one."""
    if _is_name(bound, name):
        return True
    return (isinstance(bound, cst.BinaryOperation)
            and isinstance(bound.operator, cst.Add | cst.Subtract)
            and (_bound_reads(bound.left, name) or _bound_reads(bound.right, name)))


def _decide(votes: list[str | None]) -> str | None:
    known = [v for v in votes if v is not None]
    if TENSOR in known and (len(set(known)) > 1 or _NOT_TENSOR in votes):
        return None
    return unify_all(k for k in known if k != _NOT_TENSOR) if known else None


def _used_as_tensor(name: str, func: cst.FunctionDef, owner: _ClassAnnotator) -> bool:
    for attribute in find_all(func.body, cst.Attribute):
        if _is_name(attribute.value, name) and attribute.attr.value not in _CONTAINER_METHODS:
            return True
    self_var = self_name(func)
    for call in find_all(func.body, cst.Call):
        if not any(_is_name(a.value, name) for a in call.args):
            continue
        if self_var and isinstance(call.func, cst.Attribute) and _is_name(call.func.value,
                                                                          self_var):
            if call.func.attr.value in owner.layers:
                return True
            continue
        qualified = qualified_name(call.func, owner.rule.imports) or ""
        if qualified.startswith("torch.") and \
                qualified.rpartition(".")[2] not in _CONSTRUCTORS:
            return True
    return False


def _from_observation(kind: str | None) -> str | None:
    if kind is None:
        return None
    return re.sub(r"\bNoneType\b", "None", kind)


def _relaxed(kind: str) -> str:
    return re.sub(r"\bNone\b", TENSOR, re.sub(r"Optional\[Tensor\]", TENSOR, kind))


def _is_name(node: cst.CSTNode | None, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _literal_kind(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Integer):
        return "int"
    if isinstance(node, cst.Float):
        return "float"
    if isinstance(node, cst.SimpleString):
        return "str"
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _literal_kind(node.expression)
    return None


def _own(body: cst.CSTNode, kind: type[cst.CSTNode]) -> list:  # type: ignore[type-arg]
    """Nodes of ``kind`` in ``body`` outside nested functions, lambdas and classes."""
    nested: set[int] = set()
    for inner in find_all(body, cst.FunctionDef, cst.Lambda, cst.ClassDef):
        nested.update(id(n) for n in find_all(inner, kind))
    return [n for n in find_all(body, kind) if id(n) not in nested]


def _none_tests(body: cst.CSTNode, self_var: str, attr: str) -> dict[int, bool]:
    """``self.<attr> is (not) None`` tests in ``body`` -> whether the test sits in an and/or
    chain that reads the attribute again (the case TorchScript cannot refine)."""
    tests: dict[int, bool] = {}
    chains = find_all(body, cst.BooleanOperation)
    for comparison in find_all(body, cst.Comparison):
        if not (self_attr(comparison.left, self_var) == attr and len(comparison.comparisons) == 1
                and isinstance(comparison.comparisons[0].operator, cst.Is | cst.IsNot)
                and _is_name(comparison.comparisons[0].comparator, "None")):
            continue
        in_chain = False
        for chain in chains:
            members = find_all(chain, cst.Comparison)
            if any(m is comparison for m in members):
                reads = [a for a in find_all(chain, cst.Attribute)
                         if self_attr(a, self_var) == attr]
                in_chain = in_chain or len(reads) > 1
        tests[id(comparison)] = in_chain
    return tests


def _assigns_attr(func: cst.FunctionDef, self_var: str, attr: str) -> bool:
    for target in find_all(func.body, cst.AssignTarget, cst.AugAssign, cst.AnnAssign):
        node = target.target
        if self_attr(node, self_var) == attr:
            return True
    return False


def _has_docstring(body: list[cst.BaseStatement]) -> bool:
    if not body or not isinstance(body[0], cst.SimpleStatementLine):
        return False
    first = body[0].body[0] if body[0].body else None
    return isinstance(first, cst.Expr) and isinstance(first.value, cst.SimpleString |
                                                      cst.ConcatenatedString)


def _prepend(body: cst.BaseSuite, lines: Iterable[str]) -> cst.BaseSuite:
    if not isinstance(body, cst.IndentedBlock):
        return body
    statements = list(body.body)
    at = 1 if _has_docstring(statements) else 0
    added = [cst.parse_statement(line + "\n") for line in lines]
    return body.with_changes(body=[*statements[:at], *added, *statements[at:]])


def _without_trailing_comma(params: list[cst.Param]) -> list[cst.Param]:
    """After ``*``, ``*args`` or ``**kwargs`` went away, the last parameter's comma pointed at
    them; a comma that ends a multi-line signature (black's magic comma) stays."""
    if not params or not isinstance(params[-1].comma, cst.Comma):
        return params
    if isinstance(params[-1].comma.whitespace_after, cst.ParenthesizedWhitespace):
        return params
    return [*params[:-1], params[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
