"""The cases the verifier checks (:mod:`tsfix.codemods.validation.verifier` says what a case,
a target and a step are): a class job's case (:class:`ClassCase`, from its example table or a
guessed input), a class a configured model reaches (:class:`ReachedCase`, from the calls the
model's run recorded), and the lifted settings as each target takes them."""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass, field
from typing import Any

import torch
from tsfix.codemods.validation.protocol import JobClass, ModelClass
from tsfix.codemods.validation.worker import Instance, OtherBatch, rejected

Expected = tuple[str, tuple[Any, ...], dict[str, Any], Any]
"""One call a module must reproduce: (label in the reason, args, kwargs, the original's output)."""


def literal(text: str) -> str:
    """``text`` kept as it is inside a template of :class:`~tsfix.codemods.validation.verifier.
    Check` (a file name may hold braces)."""
    return text.replace("{", "{{").replace("}", "}}")


def setting_value(value: Any, codes: dict[str, int] | None = None, *, double: bool = False
                  ) -> torch.Tensor:
    """A configuration's setting as the 0-d tensor its lifted ``Optional[Tensor]`` argument
    takes: what the rewrite's own default ``torch.tensor(self.<attribute>)`` makes, or a
    string's int code. ``double``: a float as float64 (the TorchScript-based ONNX exporter
    types a Python float as a double)."""
    if isinstance(value, str):
        return torch.tensor((codes or {}).get(value, -1))
    if double and isinstance(value, float):
        return torch.tensor(value, dtype=torch.float64)
    return torch.tensor(value)


def target_settings(values: dict[str, Any], lifted: dict[str, str],
                    codes: dict[str, dict[str, int]], target: str) -> dict[str, Any]:
    """Lifted arguments' values (parameter -> setting) as the target takes them: as they are
    for TorchScript, 0-d tensors for the export and onnx targets (``codes``: attribute ->
    {string: int code} of the str settings lift-branch turned into codes)."""
    if target not in ("export", "onnx"):
        return values
    return {param: setting_value(value, codes.get(lifted[param]), double=target == "onnx")
            for param, value in values.items()}


@dataclass(eq=False)
class ClassCase:
    """A class job's case: the job's class, its configurations (:class:`~tsfix.codemods.
    validation.worker.Instance`) and what each step leaves for the next ones, per
    configuration ``k``: the built instances, the original's outputs, the call at the second
    batch size; then which configurations one artifact serves and its first instance."""

    original: types.ModuleType
    rewritten: types.ModuleType
    job_class: JobClass
    rename: dict[str, str]
    target: str
    codes: dict[str, dict[str, int]]
    configs: list[Instance] = field(default_factory=list)
    originals: list[Any] = field(default_factory=list)
    rewrites: list[Any] = field(default_factory=list)
    expected: list[list[Any]] = field(default_factory=list)
    varied: list[OtherBatch | None] = field(default_factory=list)
    served: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first: Any = None
    eager_served: str = ""
    conds: Any = None           # export target: export.CondRecorder of the rewritten file

    @property
    def lifted(self) -> dict[str, str]:
        return dict(self.job_class.lifted)

    @property
    def n_calls(self) -> int:
        return sum(len(inst.calls) for inst in self.configs)

    def values(self, k: int) -> dict[str, Any]:
        """Configuration ``k``'s settings as the lifted arguments take them."""
        lifted = self.lifted
        values = {param: getattr(self.rewrites[k], attr) for param, attr in lifted.items()}
        return target_settings(values, lifted, self.codes, self.target)

    def calls(self, k: int, *, show_init: bool = False) -> list[Expected]:
        inst = self.configs[k]
        return [(inst.label(j, show_init=show_init), args, kwargs, self.expected[k][j])
                for j, (args, kwargs) in enumerate(inst.calls)]

    def recording(self) -> contextlib.AbstractContextManager[Any]:
        return self.conds.recording() if self.conds is not None else contextlib.nullcontext()


# ---- calls recorded from a configured model ----------------------------------------------

@dataclass(eq=False)
class RecordedCall:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    batch: int | None = None            # recorded in the model's run at this batch size


@dataclass(eq=False)
class Seen:
    """One submodule instance of the original model (of a tree class) and its recorded calls."""

    config: int
    path: str                           # named_modules() path; "" is the model itself
    module: torch.nn.Module
    file: str                           # resolved file of its class
    name: str                           # the class's __qualname__
    # (file, qualname) of its class and of each base defined in the tree: an instance of a
    # subclass runs the methods a base defines (a wrapper that only changes __init__).
    lineage: tuple[tuple[str, str], ...] = ()
    calls: list[RecordedCall] = field(default_factory=list)
    called: int = 0                     # calls seen, recorded or not
    not_recorded: str | None = None     # why a call was not recorded

    def label(self, many_configs: bool, j: int | None = None) -> str:
        text = self.path or "model"
        if many_configs:
            text += f" (init[{self.config}])"
        if j is not None and len(self.calls) > 1:
            text += f" call[{j}]"
        if j is not None and j < len(self.calls) and self.calls[j].batch is not None:
            text += f" at batch size {self.calls[j].batch}"
        return text


@dataclass(eq=False)
class Pair:
    """An instance of the original model and the same instance of the rewritten model."""

    seen: Seen
    new: torch.nn.Module


class Notes:
    """Instances one artifact was not asked to serve, by why: counted, a few named."""

    def __init__(self) -> None:
        self.by_why: dict[str, list[str]] = {}

    def add(self, why: str, label: str) -> None:
        self.by_why.setdefault(why, []).append(label)

    def __bool__(self) -> bool:
        return bool(self.by_why)

    def __str__(self) -> str:
        parts = []
        for why, labels in self.by_why.items():
            shown = "; ".join(labels[:2]) + ("; ..." if len(labels) > 2 else "")
            parts.append(f"{len(labels)} {why} ({shown})")
        return ", ".join(parts)


@dataclass(eq=False)
class ReachedCase:
    """A class a configured model reaches: the instances of it the model holds, each the
    original instance with the calls the model's run made on it and the same instance of the
    rewritten model (``pairs``); then the instance one artifact is made from (``first``) and
    the instances it was not asked to serve (``notes``), and why an instance that also differs
    in a setting that is not lifted may fail to be served (``excusable``, by ``id``).
    ``codes``: as for a class job."""

    model_class: ModelClass
    pairs: list[Pair]
    many_configs: bool
    model_label: str
    rename: dict[str, str]
    target: str
    codes: dict[str, dict[str, int]] = field(default_factory=dict)
    first: Pair | None = None
    notes: Notes = field(default_factory=Notes)
    excusable: dict[int, str] = field(default_factory=dict)

    @property
    def called(self) -> list[Pair]:
        return [p for p in self.pairs if p.seen.calls]

    @property
    def never(self) -> list[Pair]:
        return [p for p in self.pairs if not p.seen.calls]

    def where(self, p: Pair, j: int | None = None) -> str:
        return p.seen.label(self.many_configs, j)

    def calls(self, p: Pair) -> list[Expected]:
        return [(self.where(p, j), recorded.args, recorded.kwargs, recorded.output)
                for j, recorded in enumerate(p.seen.calls)]

    def values(self, p: Pair) -> dict[str, Any]:
        """Instance ``p``'s settings as the lifted arguments take them."""
        lifted = dict(self.model_class.lifted)
        missing = [attr for attr in lifted.values() if not hasattr(p.new, attr)]
        if missing:
            raise rejected(f"one artifact: the rewritten {self.where(p)} has no attribute "
                           f"{missing[0]} (lifted)")
        values = {param: getattr(p.new, attr) for param, attr in lifted.items()}
        return target_settings(values, lifted, self.codes, self.target)
