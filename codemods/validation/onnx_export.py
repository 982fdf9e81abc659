"""ONNX checks for ``--target onnx``: export, ``onnx.checker``, onnxruntime, branch inputs.

Imported only by the validation worker, and only for jobs whose target is ``onnx``: onnx and
onnxruntime are an optional extra (``pip install tsfix[onnx]``), and the engine checks they are
installed before any worker starts.

What is measured here (torch 2.13, onnx 1.23, onnxruntime 1.31), and what the worker does:

- ``torch.onnx.export(scripted, args, f, dynamo=False)`` is the TorchScript-based exporter; it
  freezes the module, so every attribute becomes a constant and only graph inputs stay free.
  It needs a value for every forward parameter (given, else the declared default) and cannot
  take ``None``: an example that leaves an ``Optional`` argument at None is not checked
  (unverified, with the reason), since that is no fault of the rewrite.
- A Python scalar argument (``bool``/``int``/``float``) becomes a 0-d ``tensor(bool/int64/
  double)`` input; an unused argument is dropped from the graph. Inputs are named after the
  forward parameters, so feeds are given by name.
- A tuple output becomes several graph outputs and a list a sequence output; outputs are
  compared flattened, in order.
- A lifted setting keeps its paths when a branch in the graph depends on the input's value:
  the condition of an ``If`` (or the trip count / condition of a ``Loop``, for ``while i < n``)
  is computed from it. Presence (``OptionalHasElement``) does not count: the ``if x is not
  None`` of the lifted form tests presence, not the setting.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import onnxruntime  # type: ignore[import-untyped]
import torch

# lift-branch's str settings as int codes, shared with the export target.
from tsfix.codemods.validation.export import string_codes as string_codes

# Graph ops whose output tells whether an optional input is present, not its value.
_PRESENCE_OPS = {"OptionalHasElement"}


class OnnxFailure(Exception):
    """The class does not export, or the exported model is wrong: a rejection."""


class OnnxUnsupported(Exception):
    """The check cannot be made for this example (not the rewrite's fault): unverified."""


# ---- export ------------------------------------------------------------------------------------

def forward_parameters(module: Any) -> list[tuple[str, Any]]:
    """(name, default) of a ScriptModule's forward parameters after ``self``."""
    arguments = module.forward.schema.arguments
    return [(a.name, a.default_value) for a in arguments[1:]]


def export_arguments(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                     ) -> list[tuple[str, Any]]:
    """Every forward parameter with its value: given, else its declared default (a scripted
    module's graph takes all of them)."""
    parameters = forward_parameters(module)
    given = dict(zip([name for name, _ in parameters], args, strict=False))
    unknown = set(kwargs) - {name for name, _ in parameters}
    if unknown:
        raise OnnxUnsupported(f"forward has no parameter {', '.join(sorted(unknown))}")
    given.update(kwargs)
    chosen = []
    for name, default in parameters:
        value = given.get(name, default)
        if value is None:
            raise OnnxUnsupported(f"argument {name} is None, and the TorchScript-based "
                                  "exporter cannot take None; give it a value in the example")
        if not isinstance(value, torch.Tensor | bool | int | float):
            raise OnnxUnsupported(f"argument {name} is a {type(value).__name__}; the ONNX "
                                  "check takes tensor and scalar arguments only")
        chosen.append((name, value))
    return chosen


def export(module: Any, arguments: list[tuple[str, Any]]) -> bytes:
    """The ONNX model of a ScriptModule, from the TorchScript-based exporter."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), _quiet():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, tuple(value for _, value in arguments),
                              buffer,  # type: ignore[arg-type]
                              dynamo=False, input_names=[name for name, _ in arguments])
        except Exception as exc:
            raise OnnxFailure(f"export failed: {_first_line(exc)}") from exc
    return buffer.getvalue()


def check(model_bytes: bytes) -> onnx.ModelProto:
    model = onnx.load_from_string(model_bytes)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise OnnxFailure(f"onnx.checker: {_first_line(exc)}") from exc
    return model


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter prints diagnostics on stdout in some versions; the worker's stdout is
    already stderr, but keep them out of the verdict stream anyway."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


# ---- onnxruntime -------------------------------------------------------------------------------

class Runtime:
    """One onnxruntime CPU session of an exported model."""

    def __init__(self, model_bytes: bytes) -> None:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3      # shape-inference warnings are not verdicts
        options.intra_op_num_threads = 1
        try:
            self.session = onnxruntime.InferenceSession(model_bytes, options,
                                                        providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise OnnxFailure(f"onnxruntime cannot load the model: {_first_line(exc)}") from exc
        self.input_names = [i.name for i in self.session.get_inputs()]

    def run(self, arguments: list[tuple[str, Any]]) -> list[Any]:
        values = dict(arguments)
        missing = [name for name in self.input_names if name not in values]
        if missing:
            raise OnnxFailure(f"the model expects inputs {', '.join(missing)} that forward "
                              "was not given")
        feeds = {name: _as_array(values[name]) for name in self.input_names}
        try:
            outputs: list[Any] = self.session.run(None, feeds)
        except Exception as exc:
            raise OnnxFailure(f"onnxruntime: {_first_line(exc)}") from exc
        return outputs


def _as_array(value: Any) -> np.ndarray[Any, Any]:
    if isinstance(value, torch.Tensor):
        array: np.ndarray[Any, Any] = value.detach().cpu().numpy()
        return array
    if isinstance(value, bool):
        return np.array(value)
    if isinstance(value, int):
        return np.array(value, dtype=np.int64)
    return np.array(value, dtype=np.float64)


def flatten(value: Any) -> list[Any]:
    """Tensors and scalars of a (nested) output, in order; ORT sequences are lists."""
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in flatten(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in flatten(item)]
    if isinstance(value, np.ndarray):
        return [torch.from_numpy(np.ascontiguousarray(value))]
    return [value]


def matched_outputs(expected: Any, outputs: list[Any]) -> tuple[list[Any], list[Any]]:
    """(expected leaves, onnxruntime leaves) in comparable form: a scalar expected output is
    compared with the 0-d tensor's value."""
    want, got = flatten(expected), flatten(outputs)
    if len(want) != len(got):
        raise OnnxFailure(f"onnxruntime returned {len(got)} outputs, eager {len(want)}")
    got = [g.item() if not isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor)
           and g.numel() == 1 else g for w, g in zip(want, got, strict=True)]
    return want, got


# ---- branches on lifted inputs -----------------------------------------------------------------

def undecided_inputs(model: onnx.ModelProto, names: list[str]) -> list[str]:
    """Those of ``names`` no ``If`` condition (or ``Loop`` trip count / condition) depends on
    the value of; an input the exporter dropped is undecided too."""
    present = {i.name for i in model.graph.input}
    return [name for name in names if name not in present
            or not _decides_a_branch(model.graph, name)]


def _decides_a_branch(graph: onnx.GraphProto, source: str) -> bool:
    reached = {source}
    decided = False

    def walk(g: onnx.GraphProto) -> None:
        nonlocal decided
        for node in g.node:
            if node.op_type in _PRESENCE_OPS:
                continue
            bodies = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
            if node.op_type == "If" and node.input and node.input[0] in reached:
                decided = True
            if node.op_type == "Loop":
                if any(name in reached for name in node.input[:2] if name):
                    decided = True
                for body in bodies:
                    # Loop-carried inputs of the body follow the node's inputs after M, cond.
                    for outer, inner in zip(node.input[2:], body.input[2:], strict=False):
                        if outer in reached:
                            reached.add(inner.name)
            for body in bodies:
                walk(body)
                if node.op_type == "Loop" and body.output and body.output[0].name in reached:
                    decided = True
            if (any(name in reached for name in node.input)
                    or any(o.name in reached for body in bodies for o in body.output)):
                reached.update(node.output)

    walk(graph)
    # Reached values may flow back into a Loop's carried inputs: one more pass settles it.
    walk(graph)
    return decided


def count_nodes(graph: onnx.GraphProto, op_type: str) -> int:
    """Nodes of ``op_type`` in the graph and every subgraph."""
    total = 0
    for node in graph.node:
        total += node.op_type == op_type
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                total += count_nodes(attribute.g, op_type)
    return total
