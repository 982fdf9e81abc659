"""``numpy-to-torch``: numpy expressions with an exact torch or math equivalent.

What it does
    In what ``torch.jit.script`` compiles (``forward()``, ``@torch.jit.export`` methods and
    the methods they reach; methods decorated ``@torch.jit.ignore``/``@torch.jit.unused`` and
    the code of ``if torch.jit.is_scripting():`` tests that never compiles are left alone),
    numpy code is translated, statement by statement, into the torch or ``math`` code that
    computes the same values with the same dtypes:

    * arrays: ``np.exp/log/log1p/expm1/sqrt/sin/cos/tan/tanh/arc*/...`` -> ``torch.*``;
      ``np.abs/square/sign/negative``, ``np.floor/ceil/trunc/round`` (float arrays),
      ``np.isnan/isinf/isfinite/logical_*``, ``np.maximum/minimum`` (``torch.clamp`` against a
      scalar), ``np.clip`` -> ``torch.clamp``, ``np.where(c, x, y)`` -> ``torch.where``,
      ``np.add/subtract/multiply/divide/power/mod/floor_divide/matmul`` -> operators,
      ``np.fmod/arctan2/hypot`` -> ``torch.*``;
    * reductions (function or method): ``sum/prod/mean/std/var/max/amax/min/amin/argmax/
      argmin/any/all/cumsum/cumprod`` with ``axis=`` -> ``dim=``, ``keepdims`` -> ``keepdim``,
      ``ddof`` -> ``correction`` (numpy's default ddof=0 is written out: torch's is 1), and a
      reduction over an axis of ``max``/``min`` -> ``amax``/``amin``;
    * construction: ``np.zeros/ones/empty/full(shape)``, ``*_like``, ``np.arange``,
      ``np.linspace``, ``np.eye``, ``np.hanning/hamming/blackman/bartlett(n)`` (->
      ``torch.*_window(n, periodic=False)``), ``np.array/asarray`` of a list of numbers, with
      numpy's dtype spelled out (``dtype=torch.float64`` where numpy defaults to float64 and
      torch would give float32; ``np.float32``/``float``/``"int64"`` -> ``torch.float32``/...);
    * shapes: ``np.concatenate/stack/hstack/vstack`` -> ``torch.cat/stack/hstack/vstack``,
      ``np.reshape``, ``np.expand_dims`` -> ``torch.unsqueeze``, ``np.squeeze``,
      ``np.transpose(a, axes)`` -> ``torch.permute``, ``np.flip``, ``np.tril/triu``,
      ``np.copy``/``a.copy()`` -> ``clone()``, ``a.astype(d)`` -> ``a.to(torch.d)``,
      ``a.ndim`` -> ``a.dim()``, ``a.size`` -> ``a.numel()``, ``np.newaxis`` -> ``None``;
    * tensors in and out: ``t.numpy()`` is dropped from ``t.cpu().numpy()``,
      ``t.detach().cpu().numpy()`` and ``t.data.numpy()`` (``.data`` scripts), and the
      ``torch.from_numpy(...)`` / ``torch.as_tensor(...)`` wrapper around a translated array
      is removed, keeping what follows it (``.to(x.device)``, ``.float()``);
      ``torch.tensor(a)`` (a copy) becomes ``a.clone()``; an array passed as the lengths of
      ``pack_padded_sequence`` stays a (CPU int64) tensor;
    * scalars: ``np.pi/e/inf/nan`` -> ``math.*``, and numpy functions of Python numbers
      (``np.sqrt(self.d_model)``, ``np.log(x.size(-1))``) -> ``math.sqrt``/``math.log``/...
      (``import math`` is added when the file lacks it; ``import torch`` likewise).

    Arithmetic, comparisons, indexing, slice assignment and augmented assignment on translated
    arrays stay as written; where torch would compute in another dtype than numpy, the
    operand is cast first (see Fix safety).

Why it breaks export
    TorchScript compiles no numpy: every numpy call, ``np.pi``, ``t.numpy()`` and
    ``torch.from_numpy`` fails to script, often with an unhelpful message ("cannot create weak
    reference to 'numpy.ufunc' object", "'Tensor' object has no attribute or method
    'numpy'"). Moving the code into a ``@torch.jit.ignore`` method (``ignore-numpy``) scripts
    but cannot be saved or exported; a translation can.

Example
    Before::

        lens = lengths.cpu().numpy()
        mask = np.arange(x.size(1))[None, :] < lens[:, None]
        scale = 1.0 / np.sqrt(self.d_model)
        return x.masked_fill(~torch.from_numpy(mask).to(x.device), 0.0) * scale

    After::

        lens = lengths.cpu()
        mask = torch.arange(x.size(1))[None, :] < lens[:, None]
        scale = 1.0 / math.sqrt(self.d_model)
        return x.masked_fill(~mask.to(x.device), 0.0) * scale

Fix safety
    The translation is meant to be exact, not merely to compile, and is decided statically,
    statement by statement, from what the code says about types:

    * dtypes follow numpy 2 (NEP 50): every translated array has the dtype numpy gives it.
      Where torch's promotion differs (integer true division and integer arrays with a float
      are float64 in numpy, float32 in torch; ``int64`` with ``float32`` is float64 in numpy;
      a float32 array with a float64 numpy scalar is float64), the operand is cast first
      (``a.to(torch.float64) / n``), which is what numpy computes; each cast is a note.
      Float ufuncs of integer arrays are cast to numpy's float type first.
      What cannot be made exact is not translated: an array whose dtype is unknown (it came
      from ``t.numpy()``) in a true division, a mean, a float ufunc or with a float;
      ``np.where`` of two float scalars; integer ``np.floor/ceil`` (numpy 2 keeps the integer
      dtype since 2.x, older numpy does not).
    * arrays live on the CPU, and so do their translations (torch's default device): the
      original's own ``.to(x.device)`` after ``torch.from_numpy`` moves the tensor as before.
      ``t.cpu().numpy()`` -> ``t.cpu()`` (a no-op on a CPU tensor, sharing memory as
      ``.numpy()`` does). ``t.numpy()`` raises for a tensor that requires grad or lives on a
      GPU; the translation does not, so it agrees wherever the original runs.
    * comparisons of an array whose dtype is unknown with a number or an integer array are
      translated: the result only differs if integers beyond 2**24 meet a float32 array
      (torch compares in float32, numpy in float64); a note says so.
    * scalar ``math`` replaces numpy scalars (``np.float64`` -> ``float``, same value; math
      raises ``ValueError`` where numpy returns nan/inf with a warning, e.g. ``sqrt(-1)``).
      Such a value is not translated when untranslated numpy code reads it (numpy 2 promotes
      a float32 array with an ``np.float64`` but not with a ``float``). ``np.log2`` and
      ``np.hypot`` of scalars are not translated (``math.log2``/``math.hypot`` do not script).
    * whole reductions return a 0-d tensor instead of a numpy scalar: such a value is only
      used where both behave alike (translated arithmetic, ``int()``, ``float()``, ``.item()``,
      a test); ``range()``, slicing and other uses are refused. ``a[i]`` (integers only) may
      be a numpy scalar or an array (ranks are not tracked): it is translated only where
      torch's promotion cannot tell the difference (no cast needed).
    * a name that holds an array is translated together with every statement that reads it:
      if one of them cannot be translated (or only runs in eager mode, or returns the array,
      stores it on ``self``, passes it to another function or iterates it), none is, so no
      untranslated numpy code ever receives a Tensor. A statement reading a numpy name the
      rule left alone is left too. Each numpy use left is reported (``-v``; ``tsfix check``:
      TSF205) with the reason, for ``ignore-numpy`` to handle: ``np.median`` (torch's
      returns the lower middle value), ``np.percentile``/``quantile``, ``np.searchsorted``,
      ``np.unique``, ``np.sort``/``argsort`` (tie order), ``np.random`` (other generator),
      ``np.fft``, ``np.linalg``, ``a.tolist()`` (TorchScript needs the element type spelled
      out), ``.T``, numpy in a type annotation, numpy functions applied to a torch Tensor,
      and every name not in the list above.
    * ``a.astype(d)`` -> ``a.to(d)`` does not copy when the dtype already matches, so a later
      in-place write into such an array is refused; ``np.array(a)`` -> ``a.clone()``.
    * float results may differ from numpy's in the last bits (libm vs torch kernels,
      summation order of float32 reductions); validation compares with a tolerance.
    The numpy import is kept (other code may use it).
"""

# The rule is a package; its modules, in the order a translation flows through them:
#   _classes      one class: which methods to translate, what is reported, the rewrite
#   _walk         one method: the statement walk, unit by unit, to a fixed point
#   _expressions  expression translation (names, attributes, calls, operators, subscripts)
#   _promotion    dtype promotion: numpy's and torch's rules, and the casts that reconcile them
#   _calls        numpy functions and ndarray methods, translated by the handlers the table names
#   _table        the call table as data: what each numpy name becomes, or why it is refused
#   _values       what the walk knows about a value (array, numpy scalar, number, Tensor, ...)
#   _state        what one method translation carries from unit to unit

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import libcst as cst
from tsfix.codemods.facts.numpy_usage import may_use_numpy
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.rules.base import Code, Example, Rule
from tsfix.codemods.rules.imports import add_module_import
from tsfix.codemods.rules.numpy_to_torch._classes import ClassTranslator

__all__ = ["NumpyToTorch"]


class NumpyToTorch(Rule):
    __doc__ = __doc__

    name = "numpy-to-torch"
    # --rule all order: before ignore-numpy: what has an exact torch form is translated (the
    # artifact then saves), and only the rest is moved into an ignored method. Before
    # data-dependent-branch (export): ``if np.any(...)`` translated to a tensor test is lowered
    # to torch.cond in the same run, so a second run has nothing left to do.
    order = 62
    CODES = (
        Code("TSF205", "numpy", "numpy in a compiled method",
             "TorchScript cannot call numpy (often \"cannot create weak reference to "
             "'numpy.ufunc' object\" or \"'Tensor' object has no attribute or method 'numpy'\"). "
             "Translate to torch/math, or move it into a @torch.jit.ignore method "
             "(ignore-numpy)."),
    )
    summary = "Translate numpy calls in compiled methods to their exact torch / math equivalents"

    INVALID: ClassVar[Sequence[Example]] = (
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Scaled(nn.Module):\n"
            "    def __init__(self, d_model=16):\n"
            "        super().__init__()\n"
            "        self.d_model = d_model\n\n"
            "    def forward(self, x):\n"
            "        x = x.masked_fill(x < -3, -np.inf)\n"
            "        return x * np.sqrt(self.d_model) + np.pi\n",
            "import math\n\nimport numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Scaled(nn.Module):\n"
            "    def __init__(self, d_model=16):\n"
            "        super().__init__()\n"
            "        self.d_model = d_model\n\n"
            "    def forward(self, x):\n"
            "        x = x.masked_fill(x < -3, -math.inf)\n"
            "        return x * math.sqrt(self.d_model) + math.pi\n",
        ),
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class LengthMask(nn.Module):\n"
            "    def forward(self, x, lengths):\n"
            "        lens = lengths.cpu().numpy()\n"
            "        mask = np.arange(x.size(1))[None, :] < lens[:, None]\n"
            "        mask = torch.from_numpy(mask).to(x.device)\n"
            "        return x * mask.unsqueeze(-1)\n",
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class LengthMask(nn.Module):\n"
            "    def forward(self, x, lengths):\n"
            "        lens = lengths.cpu()\n"
            "        mask = torch.arange(x.size(1))[None, :] < lens[:, None]\n"
            "        mask = mask.to(x.device)\n"
            "        return x * mask.unsqueeze(-1)\n",
        ),
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Classifier(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.head = nn.Linear(8, 4)\n\n"
            "    def forward(self, x):\n"
            "        probs = self.head(x).softmax(-1).detach().cpu().numpy()\n"
            "        preds = np.argmax(probs, axis=1)\n"
            "        return torch.from_numpy(preds)\n",
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Classifier(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.head = nn.Linear(8, 4)\n\n"
            "    def forward(self, x):\n"
            "        probs = self.head(x).softmax(-1).detach().cpu()\n"
            "        preds = torch.argmax(probs, dim=1)\n"
            "        return preds\n",
        ),
        Example(
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Positions(nn.Module):\n"
            "    def forward(self, x):\n"
            "        T, D = x.size(1), x.size(2)\n"
            "        pos = np.arange(T)[:, None]\n"
            "        angle = pos / np.power(10000, 2 * (np.arange(D)[None, :] // 2) / D)\n"
            "        table = np.zeros((T, D))\n"
            "        table[:, 0::2] = np.sin(angle[:, 0::2])\n"
            "        table[:, 1::2] = np.cos(angle[:, 1::2])\n"
            "        return x + torch.from_numpy(table).float()\n",
            "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
            "class Positions(nn.Module):\n"
            "    def forward(self, x):\n"
            "        T, D = x.size(1), x.size(2)\n"
            "        pos = torch.arange(T)[:, None]\n"
            "        angle = pos / torch.pow(10000, (2 * (torch.arange(D)[None, :] // 2))"
            ".to(torch.float64) / D)\n"
            "        table = torch.zeros((T, D), dtype=torch.float64)\n"
            "        table[:, 0::2] = torch.sin(angle[:, 0::2])\n"
            "        table[:, 1::2] = torch.cos(angle[:, 1::2])\n"
            "        return x + table.float()\n",
        ),
        Example(
            "from numpy import exp, clip, pi\nimport torch\nfrom torch import nn\n\n\n"
            "class Gate(nn.Module):\n"
            "    def forward(self, x):\n"
            "        g = torch.sigmoid(x).detach().numpy()\n"
            "        g = clip(exp(g) * pi, 0.0, 1.0)\n"
            "        return x * torch.from_numpy(g)\n",
            "import math\n\nfrom numpy import exp, clip, pi\nimport torch\n"
            "from torch import nn\n\n\n"
            "class Gate(nn.Module):\n"
            "    def forward(self, x):\n"
            "        g = torch.sigmoid(x).detach()\n"
            "        g = torch.clamp(torch.exp(g) * math.pi, 0.0, 1.0)\n"
            "        return x * g\n",
        ),
    )
    VALID: ClassVar[Sequence[str]] = (
        # The array feeds numpy code that has no exact torch form: nothing is translated.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Clip(nn.Module):\n"
        "    def forward(self, x):\n"
        "        a = x.detach().cpu().numpy()\n"
        "        hi = np.percentile(a, 99)\n"
        "        return x.clamp(max=float(hi))\n",
        # Ignored methods and the branch that never compiles are left alone.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Debug(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if not torch.jit.is_scripting():\n"
        "            print(np.abs(x.detach().numpy()).max())\n"
        "        return self.stats(x)\n\n"
        "    @torch.jit.ignore\n"
        "    def stats(self, x):\n"
        "        return torch.from_numpy(np.exp(x.numpy()))\n",
        # Integer true division of an array whose dtype is unknown: numpy gives float64 for
        # integers, torch float32; refused.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Ratio(nn.Module):\n"
        "    def forward(self, x, lengths):\n"
        "        ratio = lengths.numpy() / x.size(1)\n"
        "        return x * torch.from_numpy(ratio)[:, None]\n",
        # The array is returned: translating would change what forward returns.
        "import numpy as np\nimport torch\nfrom torch import nn\n\n\n"
        "class Export(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return np.exp(x.detach().numpy())\n",
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.module_imports: set[str] = set()

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        # Every numpy use spells the word: an import of numpy (at module level or inside a
        # method), ``t.numpy()`` or ``torch.from_numpy``.
        return may_use_numpy(file.text) and (file.tree is None or bool(file.compiled))

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        if self.source_text is not None and not may_use_numpy(self.source_text):
            return tree     # no numpy, no .numpy(), no from_numpy: nothing to walk
        result = super().transform_module_impl(tree)
        if not self.changes:
            return result
        for name in sorted(self.module_imports):
            result = add_module_import(result, name)
        return result

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        translator = ClassTranslator(self, cls)
        rewritten = translator.rewrite()
        self.module_imports |= translator.module_imports
        return rewritten
