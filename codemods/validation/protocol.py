"""What the engine and a validation worker say to each other: typed records on both sides, one
JSON object per line on the pipe.

Engine to worker (the worker's stdin), one job per line:

* :class:`ValidationJob` ``{"op": "validate", "id", "path", "source", "classes", "sys_path",
  "target"}``: a rewritten file (``source``) beside its original (``path``), and for each
  :class:`JobClass` the rules that changed it, the lifted parameters, whether it is
  Python-only, and its :class:`Example`;
* :class:`ObserveJob` ``{"op": "observe", "id", "path", "classes", "sys_path"}``: run the
  original file's examples eagerly and record types (each :class:`ObserveClass` names a class
  and its example).

Worker to engine (the stdout it was started with), one result per line:

* ``{"ready": true}`` once, after torch is imported (:data:`READY`);
* :class:`ValidationResult` ``{"id", "classes": [ClassVerdict, ...]}``;
* :class:`ObservationResult` ``{"id", "observed", "failures"}``;
* :class:`JobFailure` ``{"id", "error"}``: an exception escaped the job (its traceback).

Every record has ``to_json()`` (a JSON-able dict) and ``from_json(data)``. This module imports
neither torch nor LibCST: both processes load it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from tsfix.codemods.validation import (
    REJECTED,
    UNVERIFIED,
    VERDICTS,
    VERIFIED,
    VerdictName,
    verdict_name,
)

__all__ = ["NOT_SCRIPTABLE_EITHER", "READY", "REJECTED", "UNVERIFIED", "VERDICTS", "VERIFIED",
           "ClassVerdict", "Example", "ExampleCall", "Job", "JobClass", "JobFailure",
           "ObservationResult", "ObserveClass", "ObserveJob", "Result", "TypeTable",
           "ValidationJob", "ValidationResult", "VerdictName", "encode", "job_from_json",
           "result_from_json", "verdict_name"]

# How an ``unverified`` reason starts when the rewritten class does not script and neither did
# the original: the engine still looks for a rule to drop when several rules changed the class.
NOT_SCRIPTABLE_EITHER = "eager parity holds, but the class does not script before or after"

READY: dict[str, Any] = {"ready": True}


# ---- examples ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExampleCall:
    """One forward() call: positional and keyword arguments, tensors as descriptions
    (``{"__tensor__": {"fn": "randn", "shape": [2, 3], ...}}``) the worker materialises."""

    inputs: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "kwargs": dict(self.kwargs)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExampleCall:
        return cls(tuple(data.get("inputs") or ()), dict(data.get("kwargs") or {}))


@dataclass(frozen=True)
class Example:
    """How to build and call one class (``[tool.tsfix.examples."<file>:<Class>"]``): every
    ``init`` table with every call; or ``factory`` (``module:function`` returning
    ``[(init_kwargs, args, kwargs), ...]``); or, ``auto``, the class built with its defaults and
    called on an input guessed from its first layer. ``key`` is the table's name."""

    key: str
    init: tuple[Mapping[str, Any], ...] = ({},)
    calls: tuple[ExampleCall, ...] = (ExampleCall(),)
    factory: str | None = None
    auto: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "init": [dict(i) for i in self.init],
                "calls": [c.to_json() for c in self.calls], "factory": self.factory,
                "auto": self.auto}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Example:
        """Also reads the form :meth:`ExampleSpec.to_json
        <tsfix.codemods.pipeline.config.ExampleSpec.to_json>` writes (``inputs``/``kwargs``
        beside or instead of ``calls``)."""
        calls = data.get("calls") or [{"inputs": data.get("inputs") or [],
                                       "kwargs": data.get("kwargs") or {}}]
        return cls(str(data["key"]), tuple(dict(i) for i in data.get("init") or [{}]),
                   tuple(ExampleCall.from_json(c) for c in calls), data.get("factory"),
                   bool(data.get("auto", False)))


# ---- jobs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobClass:
    """One class of a validation job: validated once on the combined rewrite of ``rules``."""

    name: str
    example: Example
    rules: tuple[str, ...] = ()
    # lifted parameter -> the attribute it defaults to (lift-branch), of every rule together
    lifted: Mapping[str, str] = field(default_factory=dict)
    # The rewrite calls a @torch.jit.ignore method: it scripts and runs, and cannot be saved.
    python_only: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "rules": list(self.rules), "lifted": dict(self.lifted),
                "python_only": self.python_only, "example": self.example.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobClass:
        return cls(str(data["name"]), Example.from_json(data["example"]),
                   tuple(data.get("rules") or ()), dict(data.get("lifted") or {}),
                   bool(data.get("python_only", False)))


@dataclass(frozen=True)
class ValidationJob:
    """Validate ``classes`` of the rewritten file ``source`` against the original ``path``."""

    id: int
    path: str
    source: str
    classes: tuple[JobClass, ...]
    sys_path: tuple[str, ...] = ()
    # "onnx": also export each class, check it and run it in onnxruntime (step 6).
    target: str = "torchscript"

    op: Literal["validate"] = field(default="validate", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "id": self.id, "path": self.path, "source": self.source,
                "classes": [c.to_json() for c in self.classes],
                "sys_path": list(self.sys_path), "target": self.target}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ValidationJob:
        return cls(int(data["id"]), str(data["path"]), str(data["source"]),
                   tuple(JobClass.from_json(c) for c in data["classes"]),
                   tuple(data.get("sys_path") or ()), str(data.get("target", "torchscript")))


@dataclass(frozen=True)
class ObserveClass:
    name: str
    example: Example

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "example": self.example.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ObserveClass:
        return cls(str(data["name"]), Example.from_json(data["example"]))


@dataclass(frozen=True)
class ObserveJob:
    """Run the ORIGINAL file's examples of ``classes`` eagerly, recording types."""

    id: int
    path: str
    classes: tuple[ObserveClass, ...]
    sys_path: tuple[str, ...] = ()

    op: Literal["observe"] = field(default="observe", init=False)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "id": self.id, "path": self.path,
                "classes": [c.to_json() for c in self.classes],
                "sys_path": list(self.sys_path)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ObserveJob:
        return cls(int(data["id"]), str(data["path"]),
                   tuple(ObserveClass.from_json(c) for c in data["classes"]),
                   tuple(data.get("sys_path") or ()))


Job: TypeAlias = ValidationJob | ObserveJob


def job_from_json(data: Mapping[str, Any]) -> Job:
    if data.get("op") == "observe":
        return ObserveJob.from_json(data)
    return ValidationJob.from_json(data)


# ---- results -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClassVerdict:
    """One class's verdict: ``verified`` (the reason says what was checked), ``rejected``
    (``<step>: <why>``) or ``unverified`` (why it could not be decided)."""

    name: str
    verdict: VerdictName
    reason: str
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "verdict": self.verdict, "reason": self.reason,
                "duration_s": self.duration_s}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClassVerdict:
        return cls(str(data["name"]), verdict_name(data["verdict"]), str(data["reason"]),
                   float(data.get("duration_s", 0.0)))


# Observed types: class -> method -> parameter, "return" or "local <name>" -> type string.
TypeTable: TypeAlias = dict[str, dict[str, dict[str, str]]]


@dataclass(frozen=True)
class ValidationResult:
    id: int
    classes: tuple[ClassVerdict, ...]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "classes": [c.to_json() for c in self.classes]}


@dataclass(frozen=True)
class ObservationResult:
    id: int
    observed: TypeTable = field(default_factory=dict)
    # class -> why it has no observations (import, constructor or call failed)
    failures: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "observed": self.observed, "failures": dict(self.failures)}


@dataclass(frozen=True)
class JobFailure:
    """An exception escaped the job in the worker: ``error`` is its traceback."""

    id: int | None
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "error": self.error}


Result: TypeAlias = ValidationResult | ObservationResult | JobFailure


def result_from_json(data: Mapping[str, Any]) -> Result:
    if "error" in data:
        return JobFailure(data.get("id"), str(data["error"]))
    if "observed" in data:
        return ObservationResult(int(data["id"]), dict(data["observed"]),
                                 dict(data.get("failures") or {}))
    return ValidationResult(int(data["id"]),
                            tuple(ClassVerdict.from_json(c) for c in data["classes"]))


def encode(message: Job | Result | Mapping[str, Any]) -> str:
    """One line of the pipe (without its newline)."""
    data = message if isinstance(message, Mapping) else message.to_json()
    return json.dumps(data)
