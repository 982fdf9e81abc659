"""What the engine and a validation worker say to each other: typed records on both sides, one
JSON object per line on the pipe.

Engine to worker (the worker's stdin), one job per line:

* :class:`ValidationJob` ``{"op": "validate", "id", "path", "source", "classes", "sys_path",
  "target"}``: a rewritten file (``source``) beside its original (``path``), and for each
  :class:`JobClass` the rules that changed it, the lifted parameters, whether it is
  Python-only, and its :class:`Example`;
* :class:`ObserveJob` ``{"op": "observe", "id", "path", "classes", "sys_path"}``: run the
  original file's examples eagerly and record types (each :class:`ObserveClass` names a class
  and its example);
* :class:`ModelJob` ``{"op": "model", ...}``: a configured model (a class with an example table),
  built from the original tree and, with ``overlay``, from the tree as tsfix would leave it:
  every submodule instance is seen with its real inputs (types for the rules, verdicts for the
  rewritten classes it reaches), and the model gets one :class:`ModelVerdict`.

Worker to engine (the stdout it was started with), one result per line:

* ``{"ready": true}`` once, after torch is imported (:data:`READY`);
* :class:`ValidationResult` ``{"id", "classes": [ClassVerdict, ...]}``;
* :class:`ObservationResult` ``{"id", "observed", "failures"}``;
* :class:`ModelResult` ``{"id", "model_result": true, ...}``;
* :class:`JobFailure` ``{"id", "error"}``: an exception escaped the job (its traceback).

Every record has ``to_json()`` (a JSON-able dict) and ``from_json(data)``. This module imports
neither torch nor LibCST: both processes load it.
"""

from __future__ import annotations

import json
import re
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

# The "class" under which observe jobs record module-level functions of the file that compiled
# methods can call (observed[OBSERVED_FUNCTIONS][function][parameter]); no class is named so.
OBSERVED_FUNCTIONS = "<module>"


# After the place of an error, TorchScript names the function it was compiling there and the
# caller that made it compile it, innermost first ("'f' is being compiled since it was called
# from 'C.forward'").
COMPILED_FROM = re.compile(r"'([\w.]+)' is being compiled since it was called from")


def function_change_name(function: str) -> str:
    """The name under which a change to a module-level function that another file's compiled
    code calls is reported, where a class's name goes (``length_to_mask()``): the fix loop
    rewrites such a function when a model stops in it, and no class of its file owns it."""
    return f"{function}()"

__all__ = ["EAGER_PARITY_PROVEN", "MODEL_ERROR", "MODEL_FAILS", "MODEL_SCRIPTS", "NOT_CHECKED",
           "NOT_SCRIPTABLE_EITHER", "READY", "REJECTED", "STOPS_WHERE_THE_ORIGINAL_STOPS",
           "UNVERIFIED", "VERDICTS", "VERIFIED",
           "Blocker", "ClassVerdict", "Example", "ExampleCall", "Job", "JobClass", "JobFailure",
           "ModelClass", "ModelClassVerdict", "ModelJob", "ModelResult", "ModelVerdict",
           "ObservationResult", "ObserveClass", "ObserveJob", "Result", "TypeTable",
           "ValidationJob", "ValidationResult", "VerdictName", "eager_parity_proven", "encode",
           "job_from_json", "result_from_json", "verdict_name"]

# How an ``unverified`` reason starts when the rewritten class does not script and neither did
# the original: the engine still looks for a rule to drop when several rules changed the class.
NOT_SCRIPTABLE_EITHER = "eager parity holds, but the class does not script before or after"
# Ends NOT_SCRIPTABLE_EITHER's "the class still does not script" when TorchScript stops the
# rewrite at the very error it stops the original at (same message, same code quoted): no rule
# got past the original's blocker, so leaving one out cannot make the class script and no
# rule-drop trial is run for it.
STOPS_WHERE_THE_ORIGINAL_STOPS = "where the original stops"

# How the ``unverified`` reasons start that carry proof of eager parity (every configuration's
# eager outputs unchanged) for a class that does not compile, script or export, before or after:
# an unsafe rewrite with that proof is progress and is written (pipeline/safety.py).
EAGER_PARITY_PROVEN = (NOT_SCRIPTABLE_EITHER, "does not export either")


def eager_parity_proven(reason: str) -> bool:
    """Whether an ``unverified`` reason says eager parity was measured and held."""
    return reason.startswith(EAGER_PARITY_PROVEN)


# How a model job's ``unverified`` reason starts for a rewritten class it reached but could not
# judge: the rewritten tree did not import, or the rewritten model did not build or run, for an
# error blamed on other classes. The engine checks such a class again once those are left out.
NOT_CHECKED = "not checked: "

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


@dataclass(frozen=True)
class ModelClass:
    """A rewritten class of the tree that a model job gives a verdict to, from the instances
    of it the model holds (each called with the inputs the original model gave it)."""

    path: str                               # the original file, resolved
    name: str
    rules: tuple[str, ...] = ()
    lifted: Mapping[str, str] = field(default_factory=dict)
    python_only: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "name": self.name, "rules": list(self.rules),
                "lifted": dict(self.lifted), "python_only": self.python_only}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelClass:
        return cls(str(data["path"]), str(data["name"]), tuple(data.get("rules") or ()),
                   dict(data.get("lifted") or {}), bool(data.get("python_only", False)))


ModelMode = Literal["observe", "validate"]


@dataclass(frozen=True)
class ModelJob:
    """A configured model: class ``name`` of ``path`` built with ``example``.

    ``mode == "observe"``: the ORIGINAL tree only; the result has the types seen in every
    method of every class of the tree the model runs (``types``), the classes it holds
    instances of (``reached``), the tree files it imported (``files``) and whether the
    original scripts (``model.scripted_before``).

    ``mode == "validate"``: also the tree as tsfix would leave it: every file of ``overlay``
    (resolved path -> new text) replaces the original file of that path, the others are
    imported as they are. The result has a verdict for each of ``classes`` the model reaches
    and the :class:`ModelVerdict`. ``root`` is the project's folder: files under it (and not
    in the Python installation) are the model's own (the tree), whose classes are observed and
    whose lines a blocker may point at."""

    id: int
    path: str
    name: str
    example: Example
    mode: ModelMode = "validate"
    overlay: Mapping[str, str] = field(default_factory=dict)
    classes: tuple[ModelClass, ...] = ()
    sys_path: tuple[str, ...] = ()
    root: str | None = None
    target: str = "torchscript"

    op: Literal["model"] = field(default="model", init=False)

    @property
    def key(self) -> str:
        """The model as messages name it: ``path:Class``."""
        return f"{self.path}:{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "id": self.id, "path": self.path, "name": self.name,
                "example": self.example.to_json(), "mode": self.mode,
                "overlay": dict(self.overlay), "classes": [c.to_json() for c in self.classes],
                "sys_path": list(self.sys_path), "root": self.root, "target": self.target}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelJob:
        mode = str(data.get("mode", "validate"))
        if mode not in ("observe", "validate"):
            raise ValueError(f"unknown model job mode {mode!r}")
        return cls(int(data["id"]), str(data["path"]), str(data["name"]),
                   Example.from_json(data["example"]),
                   "observe" if mode == "observe" else "validate",
                   dict(data.get("overlay") or {}),
                   tuple(ModelClass.from_json(c) for c in data.get("classes") or ()),
                   tuple(data.get("sys_path") or ()), data.get("root"),
                   str(data.get("target", "torchscript")))


Job: TypeAlias = ValidationJob | ObserveJob | ModelJob


def job_from_json(data: Mapping[str, Any]) -> Job:
    if data.get("op") == "observe":
        return ObserveJob.from_json(data)
    if data.get("op") == "model":
        return ModelJob.from_json(data)
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


@dataclass(frozen=True)
class Blocker:
    """Where the model stops scripting: the first frame of TorchScript's message in the tree
    (``path`` resolved, ``line`` in the file as tsfix leaves it: the overlay's text when the
    file is rewritten), the class or function there, and TorchScript's message with temporary
    file names replaced by the real ones."""

    path: str | None
    line: int | None
    scope: str | None                       # "Class.method", "Class" or "function"; None: unknown
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "scope": self.scope,
                "message": self.message}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Blocker:
        line = data.get("line")
        return cls(data.get("path"), int(line) if line is not None else None,
                   data.get("scope"), str(data.get("message", "")))


# ModelVerdict.status
MODEL_SCRIPTS = "scripts"      # end to end, parity with the ORIGINAL eager output, save/load
MODEL_FAILS = "fails"          # does not script (blocker) or scripts with other outputs (reason)
MODEL_ERROR = "error"          # could not be decided: the original does not build or run, timeout
ModelStatus = Literal["scripts", "fails", "error"]


@dataclass(frozen=True)
class ModelVerdict:
    """One line for a configured model after every rewrite. ``reason`` says what was checked
    (scripts) or what failed; ``blocker`` is set when scripting failed."""

    status: ModelStatus
    reason: str
    scripted_before: bool | None = None     # the ORIGINAL model scripts (None: not known)
    blocker: Blocker | None = None
    python_only: bool = False               # scripts and runs, cannot be saved (ignored method)
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason,
                "scripted_before": self.scripted_before,
                "blocker": self.blocker.to_json() if self.blocker else None,
                "python_only": self.python_only, "duration_s": self.duration_s}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelVerdict:
        status = str(data["status"])
        if status not in (MODEL_SCRIPTS, MODEL_FAILS, MODEL_ERROR):
            raise ValueError(f"unknown model status {status!r}")
        blocker = data.get("blocker")
        before = data.get("scripted_before")
        return cls("scripts" if status == MODEL_SCRIPTS else
                   "fails" if status == MODEL_FAILS else "error",
                   str(data["reason"]), None if before is None else bool(before),
                   Blocker.from_json(blocker) if blocker else None,
                   bool(data.get("python_only", False)), float(data.get("duration_s", 0.0)))


@dataclass(frozen=True)
class ModelClassVerdict:
    """A verdict for one :class:`ModelClass` (its file and class), from the model's run."""

    path: str
    verdict: ClassVerdict

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, **self.verdict.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelClassVerdict:
        return cls(str(data["path"]), ClassVerdict.from_json(data))


@dataclass(frozen=True)
class ModelResult:
    """What a :class:`ModelJob` found. ``failure``: the ORIGINAL model could not be imported,
    built or run with its example (then nothing else is set)."""

    id: int
    model: ModelVerdict | None = None       # "validate" mode; "observe": scripted_before only
    classes: tuple[ModelClassVerdict, ...] = ()
    # resolved path -> TypeTable of that file's classes (observe mode)
    types: Mapping[str, TypeTable] = field(default_factory=dict)
    # resolved path -> classes of that file the model holds instances of
    reached: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    files: tuple[str, ...] = ()             # tree files the model imported, resolved
    failure: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "model_result": True,
                "model": self.model.to_json() if self.model else None,
                "classes": [c.to_json() for c in self.classes], "types": dict(self.types),
                "reached": {k: list(v) for k, v in self.reached.items()},
                "files": list(self.files), "failure": self.failure}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelResult:
        model = data.get("model")
        return cls(int(data["id"]), ModelVerdict.from_json(model) if model else None,
                   tuple(ModelClassVerdict.from_json(c) for c in data.get("classes") or ()),
                   dict(data.get("types") or {}),
                   {str(k): tuple(v) for k, v in (data.get("reached") or {}).items()},
                   tuple(data.get("files") or ()), data.get("failure"))


Result: TypeAlias = ValidationResult | ObservationResult | ModelResult | JobFailure


def result_from_json(data: Mapping[str, Any]) -> Result:
    if "error" in data:
        return JobFailure(data.get("id"), str(data["error"]))
    if data.get("model_result"):
        return ModelResult.from_json(data)
    if "observed" in data:
        return ObservationResult(int(data["id"]), dict(data["observed"]),
                                 dict(data.get("failures") or {}))
    return ValidationResult(int(data["id"]),
                            tuple(ClassVerdict.from_json(c) for c in data["classes"]))


def encode(message: Job | Result | Mapping[str, Any]) -> str:
    """One line of the pipe (without its newline)."""
    data = message if isinstance(message, Mapping) else message.to_json()
    return json.dumps(data)
