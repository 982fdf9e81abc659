"""Finding numpy in model source by binding: aliases, from-imports, shadowing, tensor idioms."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from tsfix.codemods.facts.numpy_usage import (
    function_numpy_bindings,
    module_numpy_bindings,
    numpy_uses,
)
from tsfix.codemods.facts.syntax import import_map, methods_of

SOURCE = textwrap.dedent("""\
    import numpy as np
    import numpy
    from numpy import hanning as hann, fft
    import torch as T

    try:
        from numpy import pi
    except ImportError:
        pi = 3.14159


    class Net:
        def forward(self, x, lengths):
            w = hann(x.size(1))
            m = np.arange(5)[None, :] < lengths.cpu().numpy()[:, None]
            y = T.from_numpy(np.zeros(3).sum(axis=0)) + self.np.pi + f(np=1)
            z = fft.rfft(w) * pi + numpy.e
            return x

        def shadowed(self, np, x):
            hann = x
            return np.exp(1) + hann

        def local_import(self, x):
            import numpy as onp
            return onp.sqrt(x.numpy(), out=None)
""")


def _uses() -> dict[str, list[list[tuple[str, str]]]]:
    module = cst.parse_module(SOURCE)
    bindings = module_numpy_bindings(module)
    imports = import_map(module)
    cls = next(s for s in module.body if isinstance(s, cst.ClassDef))
    found: dict[str, list[list[tuple[str, str]]]] = {}
    for name, func in methods_of(cls).items():
        visible = function_numpy_bindings(func, bindings)
        assert isinstance(func.body, cst.IndentedBlock)
        found[name] = [[(use.name, module.code_for_node(use.node))
                        for use in numpy_uses(stmt, visible, imports)]
                       for stmt in func.body.body]
    return found


def test_module_bindings_follow_every_import_form() -> None:
    bindings = module_numpy_bindings(cst.parse_module(SOURCE))
    assert bindings == {"np": "numpy", "numpy": "numpy", "hann": "numpy.hanning",
                        "fft": "numpy.fft", "pi": "numpy.pi"}


def test_uses_in_forward() -> None:
    forward = _uses()["forward"]
    assert forward[0] == [("numpy.hanning", "hann")]
    assert forward[1] == [("numpy.arange", "np.arange"),
                          (".numpy()", "lengths.cpu().numpy()")]
    # torch.from_numpy through an alias; np.zeros(3).sum is numpy.zeros, not numpy.zeros.sum;
    # self.np.pi and the keyword np= are not numpy.
    assert forward[2] == [("torch.from_numpy", "T.from_numpy(np.zeros(3).sum(axis=0))"),
                          ("numpy.zeros", "np.zeros")]
    assert forward[3] == [("numpy.fft.rfft", "fft.rfft"), ("numpy.pi", "pi"),
                          ("numpy.e", "numpy.e")]
    assert forward[4] == []


@pytest.mark.parametrize(("method", "expected"), [
    # A parameter or local that reuses a numpy name is not numpy inside that function.
    ("shadowed", [[], []]),
    # An import inside the function binds numpy there.
    ("local_import", [[], [("numpy.sqrt", "onp.sqrt"), (".numpy()", "x.numpy()")]]),
])
def test_function_bindings(method: str, expected: list[list[tuple[str, str]]]) -> None:
    assert _uses()[method] == expected
