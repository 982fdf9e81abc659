"""Validation worker process: where tsfix imports torch (with the modules it runs).

Started by :mod:`tsfix.codemods.validation.pool` as ``python -m tsfix.codemods.validation.worker``.
It reads one JSON job per line on stdin (a file's rewritten source and the classes to check) and
writes one JSON result per line on the stdout it was started with; user code's own prints go to
stderr. torch is imported once per worker, not once per model.

A ``validate`` job's classes are checked by :mod:`tsfix.codemods.validation.verifier` (the
steps and their order); this module holds what the steps stand on: the cases' inputs
(:func:`instances`, the automatic example, :class:`OtherBatch`), building, calling, comparing
(:func:`difference`), scripting (:func:`script`) and the job's imports (:func:`import_context`).

An ``"op": "observe"`` job instead imports the ORIGINAL file only, builds every configuration
of each requested class and runs its calls eagerly under ``sys.setprofile``, recording the
argument and return types of the class's methods and of its bases defined at the top level of
the same file (each under the class that defines it). The result is ``{class: {method: {param
or "return": type}}}`` in TorchScript spelling (:func:`observed_types`), merged over every call;
a parameter whose values TorchScript cannot type or that disagree is left out, and so are
``self``, ``*args`` and ``**kwargs``. At each real return, every other local's value is recorded
too, under ``"local <name>"``. Each configuration's first call also runs at the second batch
size, so that a tuple whose length follows the batch size is typed ``List[T]`` rather than the
one arity the example showed (:data:`VARIADIC_TUPLE`). A class whose import, constructor or
call fails has no observations (``failures`` says why).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dis
import faulthandler
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time
import traceback
import types
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from tsfix.codemods.validation.protocol import (
    OBSERVED_FUNCTIONS,
    READY,
    REJECTED,
    UNVERIFIED,
    ClassVerdict,
    Example,
    Job,
    JobFailure,
    ModelJob,
    ObservationResult,
    ObserveClass,
    ObserveJob,
    Result,
    ValidationJob,
    ValidationResult,
    VerdictName,
    encode,
    job_from_json,
)

RTOL, ATOL = 1e-4, 1e-5
# Why an artifact that calls a @torch.jit.ignore method cannot be saved (measured, torch 2.13).
PYTHON_ONLY_SAVE = "a @torch.jit.ignore method runs in Python only"
SEED = 0

# torch 2.13 marks every torch.jit entry point deprecated; validation uses them on purpose.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=DeprecationWarning)


class Verdict(Exception):
    """Ends one class's validation with a verdict other than verified."""

    def __init__(self, verdict: VerdictName, reason: str) -> None:
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason


def rejected(reason: str) -> Verdict:
    return Verdict(REJECTED, reason)


def unverified(reason: str) -> Verdict:
    return Verdict(UNVERIFIED, reason)


_INTERPRETER_FAILED = "The following operation failed in the TorchScript interpreter."


def short_error(exc: BaseException, rename: dict[str, str] | None = None) -> str:
    """One readable line: the message's first line and, for TorchScript, where it points."""
    text = str(exc).strip()
    for temp, real in (rename or {}).items():
        text = text.replace(temp, real)
    lines = [line.strip() for line in text.splitlines() if line.strip() and line.strip() != ":"]
    first = lines[0].rstrip(":").rstrip() if lines else ""
    if first.startswith(_INTERPRETER_FAILED) and len(lines) > 1:
        # The cause is the last line ("RuntimeError: Expected a proper Tensor but got None
        # ..."): the first says only that the scripted code raised.
        first = f"{first} {lines[-1]}"
    message = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    location = re.search(r'File "([^"]+)", line (\d+)', text)
    if location and "line" not in first:
        message += f" (at {Path(location.group(1)).name} line {location.group(2)})"
    return message[:400]


# ---- inputs ------------------------------------------------------------------------------------

def materialize(value: Any, generator: torch.Generator) -> Any:
    if isinstance(value, dict) and set(value) == {"__tensor__"}:
        return make_tensor(value["__tensor__"], generator)
    if isinstance(value, list):
        return [materialize(v, generator) for v in value]
    if isinstance(value, dict):
        return {k: materialize(v, generator) for k, v in value.items()}
    return value


def make_tensor(spec: dict[str, Any], generator: torch.Generator) -> torch.Tensor:
    dtype = getattr(torch, spec["dtype"]) if spec.get("dtype") else None
    fn = spec["fn"]
    if fn == "randint":
        made: torch.Tensor = torch.randint(spec["low"], spec["high"], tuple(spec["shape"]),
                                           generator=generator, dtype=dtype or torch.int64)
        return made
    if fn == "arange":
        made = torch.arange(*spec["args"], dtype=dtype)
        return made
    if fn in ("randn", "rand"):
        made = getattr(torch, fn)(tuple(spec["shape"]), generator=generator)
        return made.to(dtype) if dtype is not None else made
    made = getattr(torch, fn)(tuple(spec["shape"]), dtype=dtype)
    return made


def fresh(value: Any) -> Any:
    """A copy of an example value that no other build or call shares.

    The original and the rewrite are built from the same init values and called with the same
    inputs; a constructor or forward that changes an object it is given (ParityBench's
    ``FocalLoss`` sets ``loss_fcn.reduction = "none"``) would otherwise change what the next
    build or call sees. A deep copy keeps the value's own aliasing (one tensor passed twice
    stays one tensor); what cannot be deep-copied (a module object, a non-leaf tensor) is
    copied part by part, and a part that cannot be copied at all is shared, as given."""
    try:
        return copy.deepcopy(value)
    except Exception:
        pass
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(fresh(v) for v in value)
    if isinstance(value, dict):
        copied = {k: fresh(v) for k, v in value.items()}
        if type(value) is dict:
            return copied
        # A dict subclass (a config object: attribute access on its keys) stays one.
        try:
            return type(value)(copied)
        except Exception:
            return value
    return value


def clone(value: Any) -> Any:
    """Tensors copied, containers rebuilt, other objects shared: for values recorded inside a
    model's run, where a deep copy could copy whatever object graph an argument reaches."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(clone(v) for v in value)
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    return value


class Instance:
    """One ``init`` configuration and the calls made on it (every example call)."""

    def __init__(self, index: int, init: dict[str, Any],
                 calls: list[tuple[tuple[Any, ...], dict[str, Any]]],
                 many_calls: bool) -> None:
        self.index = index
        self.init = init
        self.calls = calls
        self.many_calls = many_calls
        self.guessed = ""           # automatic example: how the input was guessed

    def label(self, j: int | None = None, *, show_init: bool = False) -> str:
        """``init[1]`` or, with several calls per instance, ``init[1] call[0]``."""
        text = f"init[{self.index}]"
        if show_init and self.init:
            text += f" {self.init}"
        if j is not None and self.many_calls:
            text += f" call[{j}]"
        return text


def instances(example: Example, cls: type | None = None) -> list[Instance]:
    """Every ``init`` table, each with every call; a factory item is one instance, one call;
    an automatic example is the class built with its defaults, called on a guessed input."""
    if example.auto and cls is not None:
        return [automatic_instance(cls, example.key)]
    if example.factory:
        module_name, _, function_name = example.factory.partition(":")
        try:
            function = getattr(importlib.import_module(module_name), function_name)
            produced = list(function())
        except BaseException as exc:
            raise unverified(f"example factory {example.factory} failed: "
                             f"{short_error(exc)}") from exc
        found = []
        for i, item in enumerate(produced):
            if (not isinstance(item, tuple | list) or len(item) != 3
                    or not isinstance(item[0], dict) or not isinstance(item[2], dict)):
                raise unverified(f"example factory {example.factory} item {i}: expected "
                                 "(init_kwargs: dict, args: tuple, kwargs: dict)")
            found.append(Instance(i, dict(item[0]), [(tuple(item[1]), dict(item[2]))], False))
        if not found:
            raise unverified(f"example factory {example.factory} returned no examples")
        return found
    generator = torch.Generator().manual_seed(SEED)
    calls = [(tuple(materialize(list(c.inputs), generator)),
              materialize(dict(c.kwargs), generator)) for c in example.calls]
    return [Instance(k, materialize(dict(init), generator), calls, len(calls) > 1)
            for k, init in enumerate(example.init)]


class OtherBatch:
    """A configuration's first call again at a second batch size: what the example fixes by
    accident (a chunk count, a tuple's length, a reshape by the batch size) changes there.

    The batch size ``b`` is the leading size of the call's first tensor input (positional
    first, nested lists and dicts in order); every tensor input of one or more dimensions
    whose leading size is ``b`` grows together to ``b + 1`` by repeating its first row. Why
    ``b + 1``: it is never 1 (size 1 broadcasts and ``squeeze()`` drops it, so a model fine at
    every other size would fail there), it changes the parity and most divisors of ``b`` (2 to
    3 breaks ``x.shape[0] // 2``-sized chunks), and it costs one row. Why rows of the example:
    integer inputs (token ids, lengths, indices) keep values the model accepts, which new
    random values would not. No length axis is varied: which axis is a free length cannot be
    told from a shape. The original runs at this size first; when it raises, the batch axis is
    not free for this input and the check does not apply (``skipped`` says why)."""

    def __init__(self, size: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.size = size
        self.args = args
        self.kwargs = kwargs
        self.expected: Any = None       # the original's output at this size, once it ran
        self.skipped = ""               # why the original does not run at this size

    @property
    def label(self) -> str:
        return f"at batch size {self.size}"

    def run_original(self, module: Any) -> bool:
        """The original's output at this size (``expected``); False, with ``skipped`` set,
        when the original raises here."""
        try:
            self.expected = call(module, self.args, self.kwargs)
        except BaseException as exc:
            self.skipped = f"the original raises {self.label}: {short_error(exc)}"
            return False
        return True


def other_batch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> OtherBatch | None:
    """The call at the second batch size (:class:`OtherBatch`); None when it has no tensor
    input with a leading axis of size one or more."""
    leading = next((t.shape[0] for t in _tensors((args, kwargs)) if t.dim() > 0), 0)
    if leading < 1:
        return None

    def grow(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.dim() > 0 and value.shape[0] == leading:
                return torch.cat([value, value[:1]])
            return value
        if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
            return type(value)(grow(v) for v in value)
        if isinstance(value, dict) and type(value) is dict:
            return {k: grow(v) for k, v in value.items()}
        return value

    grown_args, grown_kwargs = grow(args), grow(kwargs)
    return OtherBatch(leading + 1, tuple(grown_args), dict(grown_kwargs))


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


# ---- comparison --------------------------------------------------------------------------------

def difference(expected: Any, got: Any, where: str = "output") -> str | None:
    """None when equal within tolerance, else what differs first."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{where}: expected a tensor, got {type(got).__name__}"
        if expected.shape != got.shape or expected.dtype != got.dtype:
            return (f"{where}: expected {tuple(expected.shape)} {expected.dtype}, "
                    f"got {tuple(got.shape)} {got.dtype}")
        if torch.equal(got, expected):
            # One pass that stops at the first difference; allclose builds several
            # temporaries of the output's size (a second per 50M floats on one thread).
            return None
        if expected.dtype.is_floating_point or expected.dtype.is_complex:
            if not torch.allclose(got, expected, rtol=RTOL, atol=ATOL, equal_nan=True):
                diff = (got - expected).abs().nan_to_num(float("inf")).max().item()
                return f"{where}: max abs diff {diff:.3g}"
            return None
        return f"{where}: values differ"
    if isinstance(expected, list | tuple):
        if not isinstance(got, list | tuple) or len(got) != len(expected):
            return f"{where}: expected a sequence of {len(expected)}, got {type(got).__name__}"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            found = difference(e, g, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"{where}: keys differ"
        for key in expected:
            found = difference(expected[key], got[key], f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(expected, float) and isinstance(got, float):
        return None if abs(expected - got) <= ATOL + RTOL * abs(expected) else \
            f"{where}: {expected} != {got}"
    return None if expected == got else f"{where}: {expected!r} != {got!r}"


# ---- automatic examples ------------------------------------------------------------------------
#
# For a class without an example table: build it with its defaults and feed its first layer
# (in registration order) what that layer takes, batch 2. A guess that does not run is never a
# rejection: the class is "unverified: could not infer inputs".

COULD_NOT_INFER = "could not infer inputs"


def add_table(key: str) -> str:
    return f'add [tool.tsfix.examples."{key}"] to pyproject.toml'


def guess_input(instance: Any) -> tuple[torch.Tensor, str] | None:
    """An input for the first layer whose type fixes its shape, and how it was made."""
    nn = torch.nn
    for layer in list(instance.modules())[1:]:
        name = type(layer).__name__
        shape: tuple[int, ...]
        if isinstance(layer, nn.Linear):
            shape = (2, layer.in_features)
        elif isinstance(layer, nn.Conv1d | nn.ConvTranspose1d):
            shape = (2, layer.in_channels, 64)
        elif isinstance(layer, nn.Conv2d | nn.ConvTranspose2d):
            shape = (2, layer.in_channels, 32, 32)
        elif isinstance(layer, nn.Conv3d | nn.ConvTranspose3d):
            shape = (2, layer.in_channels, 8, 16, 16)
        elif isinstance(layer, nn.Embedding):
            made = torch.randint(0, layer.num_embeddings, (2, 16),
                                 generator=torch.Generator().manual_seed(SEED))
            return made, f"randint(0, {layer.num_embeddings}, (2, 16)) for {name}"
        elif isinstance(layer, nn.RNNBase):
            shape = (2, 16, layer.input_size) if layer.batch_first else (16, 2, layer.input_size)
        elif isinstance(layer, nn.LayerNorm):
            shape = (2, 16, *layer.normalized_shape)
        elif isinstance(layer, nn.BatchNorm1d | nn.InstanceNorm1d):
            shape = (2, layer.num_features, 16)
        elif isinstance(layer, nn.BatchNorm2d | nn.InstanceNorm2d):
            shape = (2, layer.num_features, 16, 16)
        elif isinstance(layer, nn.BatchNorm3d | nn.InstanceNorm3d):
            shape = (2, layer.num_features, 8, 8, 8)
        elif isinstance(layer, nn.GroupNorm):
            shape = (2, layer.num_channels, 16, 16)
        else:
            continue
        made = torch.randn(shape, generator=torch.Generator().manual_seed(SEED))
        return made, f"randn{shape} for {name}"
    return None


# What a guess may cost. A class without a table is built with its defaults only to guess an
# input, and validation then builds it twice more and runs it: for full-size default models
# (timm's: 86M parameters for a ViT-Base) that took minutes of a run, for guesses that prove
# little. Classes a configured model reaches get real inputs instead; above these caps the user
# is told to add a table. 20M parameters keeps building blocks and small models (ResNet-18 has
# 11.7M) and refuses full-size defaults; 10 s is far beyond any block's build (milliseconds).
GUESS_MAX_PARAMETERS = 20_000_000
GUESS_MAX_BUILD_SECONDS = 10.0


def automatic_instance(cls: type, key: str) -> Instance:
    """The class built with its defaults and an input guessed from its first layer, unless the
    default build costs more than the caps above (then unverified, naming the cost)."""
    size = meta_parameter_count(cls)
    if size is not None and size > GUESS_MAX_PARAMETERS:
        raise unverified(too_big_to_guess(size, key))
    started = time.perf_counter()
    try:
        probe = build(cls, {})
    except BaseException as exc:
        raise unverified(f"{COULD_NOT_INFER}: the constructor needs arguments "
                         f"({short_error(exc)}); {add_table(key)}") from exc
    seconds = time.perf_counter() - started
    size = sum(p.numel() for p in probe.parameters())
    if size > GUESS_MAX_PARAMETERS:
        raise unverified(too_big_to_guess(size, key))
    if seconds > GUESS_MAX_BUILD_SECONDS:
        raise unverified(f"{COULD_NOT_INFER}: building the default model took {seconds:.1f} s "
                         f"(cap {GUESS_MAX_BUILD_SECONDS:g} s); {add_table(key)}")
    guessed = guess_input(probe)
    if guessed is None:
        raise unverified(f"{COULD_NOT_INFER}: no first layer fixes the input shape; "
                         f"{add_table(key)}")
    tensor, how = guessed
    inst = Instance(0, {}, [((tensor,), {})], False)
    inst.guessed = how
    return inst


def meta_parameter_count(cls: type) -> int | None:
    """Parameters of the default build, counted on the meta device (no memory, no weight
    init: a 100M-parameter default is refused in milliseconds); None when the constructor
    does not run there (it reads values, calls numpy, ...): the real build counts them then."""
    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe = cls()
        size: int = sum(p.numel() for p in probe.parameters())
        return size
    except (Exception, SystemExit):
        return None


def too_big_to_guess(size: int, key: str) -> str:
    return (f"{COULD_NOT_INFER}: the default model has {size:,} parameters (cap "
            f"{GUESS_MAX_PARAMETERS:,}): too costly to build just to guess an input; "
            f"{add_table(key)}")


# ---- modules -----------------------------------------------------------------------------------

def package_of(path: Path) -> tuple[str, Path]:
    """(dotted package of ``path``, folder to put on sys.path) from the __init__.py chain."""
    parts: list[str] = []
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


def identifier(text: str) -> str:
    cleaned = re.sub(r"\W", "_", text)
    return cleaned if cleaned.isidentifier() else f"_{cleaned}"


def load_module(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _of_modules(key: str, names: Iterable[str]) -> bool:
    """``key`` (``__torch__.<module>.<method>``, TorchScript's name of an overloaded method)
    belongs to one of the modules ``names`` (also once given a name of its own below it)."""
    return any(key.startswith(f"__torch__.{name}.") for name in names)


def forget_overloads(names: Iterable[str]) -> None:
    """Drop what ``@torch.jit._overload_method`` registered for the modules ``names``:
    torch keeps it per process, by module and method name, and raises "Cannot currently
    overload the same method name in two different classes with the same name in the same
    module" when a later import of that module defines the class at another line."""
    from torch import _jit_internal as jit

    names = list(names)
    for key in [k for k in jit._overloaded_methods if _of_modules(k, names)]:
        del jit._overloaded_methods[key]
    for pair in [p for p in jit._overloaded_method_class_fileno if _of_modules(p[0], names)]:
        del jit._overloaded_method_class_fileno[pair]


_overloads_apart = 0


@contextlib.contextmanager
def overloads_apart(names: Iterable[str]) -> Iterator[None]:
    """Import a second copy of the modules ``names`` (the rewritten tree, under the names the
    original already holds) with each copy's ``@torch.jit._overload_method`` declarations
    kept apart.

    torch registers them by module and method name: the rewrite of a file whose class moved
    (a rule changed a class above it) fails to import, and one that imports would script with
    both copies' declarations. The original's are set aside during the import; the copy's are
    then registered under a name of their own, which its implementations carry
    (``_jit_override_qualname``, which is how torch finds a method's overloads and changes
    nothing in eager mode), and the original's come back."""
    global _overloads_apart
    from torch import _jit_internal as jit

    names = list(names)
    methods = jit._overloaded_methods
    lines = jit._overloaded_method_class_fileno
    set_aside = {key: methods.pop(key) for key in list(methods) if _of_modules(key, names)}
    set_aside_lines = {pair: lines.pop(pair) for pair in list(lines)
                       if _of_modules(pair[0], names)}
    try:
        yield
    finally:
        _overloads_apart += 1
        for key in [k for k in methods if _of_modules(k, names)]:
            module, _, method = key.rpartition(".")
            own = f"{module}.___tsfix_copy_{_overloads_apart}.{method}"
            by_class = methods.pop(key)
            for declarations in by_class.values():
                for implementation in _implementations(declarations):
                    with contextlib.suppress(AttributeError, TypeError):
                        implementation._jit_override_qualname = own
            methods[own] = by_class
            for pair in [p for p in lines if p[0] == key]:
                lines[(own, pair[1])] = lines.pop(pair)
        methods.update(set_aside)
        lines.update(set_aside_lines)


def _implementations(declarations: list[Any]) -> Iterator[Any]:
    """The method each overload declaration declares: the function its class holds under
    the declaration's name (the last definition), found through the declaration's module and
    qualified name."""
    for declaration in declarations:
        owner: Any = sys.modules.get(getattr(declaration, "__module__", "") or "")
        path = getattr(declaration, "__qualname__", "").split(".")
        for part in path[:-1]:
            owner = vars(owner).get(part) if owner is not None else None
        found = vars(owner).get(path[-1]) if isinstance(owner, type) else None
        if inspect.isfunction(found) and found is not declaration:
            yield found


def call(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
         extra: dict[str, Any] | None = None) -> Any:
    args, kwargs = fresh((args, kwargs))
    torch.manual_seed(SEED)
    with torch.no_grad():
        return module(*args, **kwargs, **(extra or {}))


def build(cls: type, init: dict[str, Any]) -> Any:
    init = fresh(init)
    torch.manual_seed(SEED)
    instance = cls(**init)
    instance.eval()
    return instance


def script(module: torch.nn.Module) -> Any:
    """``torch.jit.script`` that leaves no half-made TorchScript type behind when it fails.

    TorchScript reuses one module type per Python class and attributes (``concrete_type_store``)
    and registers a type's methods before it compiles their bodies. After a failure, the next
    scripting of the same class (the original after the rewrite: a submodule class both import
    from another file, a class of this file contained in another, torch's own layers) would
    fail with "Can't redefine method: forward on class ..." instead of its real error. Types
    whose methods did not finish compiling are forgotten, so the next attempt builds a fresh
    type (TorchScript gives it a mangled name) and reports its own error. This keeps one
    process (no second torch import) and costs nothing when scripting succeeds."""
    _unclash_class_names(module)
    try:
        return torch.jit.script(module)
    except BaseException:
        try:
            store = torch.jit._recursive.concrete_type_store
            for known in store.type_store.values():
                known[:] = [t for t in known if t in store.methods_compiled]
        except Exception:
            pass    # a torch without this store: the scripting error is what counts
        raise


_renamed = 0


def _unclash_class_names(module: torch.nn.Module) -> None:
    """Give each module class of ``module`` that shares its qualified name with a class
    TorchScript already registered (the original of the same file, loaded under the same module
    name, or the same file loaded by an earlier job) a name of its own.

    TorchScript resolves a class named in ``isinstance(layer, Block)`` by its qualified name
    in one registry per process: with two Python classes of one name, the test compares with
    the type registered first and takes the other branch (measured: typeerror-fallback's
    dispatch ran the fallback call). ``_jit_override_qualname`` is TorchScript's own way to
    name a type; it is set on the class itself and on each of its subclasses (they would
    inherit it) and changes nothing in eager mode."""
    global _renamed
    from torch._jit_internal import _qualified_name

    registry = torch.jit._state._python_cu
    compiled = torch.jit._recursive.concrete_type_store.type_store
    for cls in {type(sub) for sub in module.modules()}:
        if (cls.__module__.split(".")[0] == "torch" or cls in compiled
                or "_jit_override_qualname" in vars(cls)):
            continue
        try:
            if registry.get_class(_qualified_name(cls)) is None:
                continue
        except Exception:
            continue
        _renamed += 1
        family, todo = [], [cls]
        while todo:
            member = todo.pop()
            family.append(member)
            todo.extend(member.__subclasses__())
        for member in family:
            if "_jit_override_qualname" not in vars(member):
                with contextlib.suppress(TypeError, AttributeError):
                    member._jit_override_qualname = (  # type: ignore[attr-defined]
                        f"__torch__.{member.__module__}.___tsfix_{_renamed}."
                        f"{member.__qualname__}")


_SITE = re.compile(r'File "([^"]+)", line (\d+)')


def comparable_text(text: str, *modules: types.ModuleType) -> str:
    """An error's text with the modules' names and files and every address made alike, so
    that the original's error and the rewrite's compare equal when only those differ."""
    for module in modules:
        text = text.replace(module.__name__, "<module>")
        file = vars(module).get("__file__")
        if isinstance(file, str):
            text = text.replace(file, "<file>")
    return re.sub(r"0x[0-9a-fA-F]+", "0x?", text)


def changed_at(site: tuple[str, int] | None, original: types.ModuleType,
               rewritten: types.ModuleType) -> bool:
    """``site`` (file, line) is in code the rewrite changed or added: a function of the
    rewritten file that differs from the original's function of that name, or anything of
    that file outside a function. Another file (a submodule's, a library's) or an unchanged
    function is not; no site counts as changed code."""
    rewritten_file = vars(rewritten).get("__file__")
    original_file = vars(original).get("__file__")
    if site is None or not isinstance(rewritten_file, str) or not isinstance(original_file, str):
        return True
    if Path(site[0]) != Path(rewritten_file):
        return False
    try:
        new_tree = ast.parse(Path(rewritten_file).read_text(encoding="utf-8"))
        old_tree = ast.parse(Path(original_file).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return True
    found = _function_at(new_tree, site[1])
    if found is None:
        return True
    name, function = found
    before = _functions(old_tree).get(name)
    return before is None or ast.dump(before) != ast.dump(function)


_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.Module) -> dict[str, _Function]:
    """Every function and method by qualified name (``Net.forward``)."""
    found: dict[str, _Function] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found[name] = child
                visit(child, f"{name}.")
    visit(tree, "")
    return found


def _function_at(tree: ast.Module, line: int) -> tuple[str, _Function] | None:
    """The innermost function whose lines (decorators included) hold ``line``."""
    best = None
    for name, function in _functions(tree).items():
        first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
        end = function.end_lineno or function.lineno
        if first <= line <= end and (best is None or first >= best[2]):
            best = (name, function, first)
    return None if best is None else (best[0], best[1])


# ---- one job (one file) ------------------------------------------------------------------------

class Imports:
    """Loads one job's files: the original as its own package module (so package-relative
    imports work), and the rewritten source beside it under another name."""

    def __init__(self, job: Job, path: Path, package: str, workdir: Path) -> None:
        self.job = job
        self.path = path
        self.package = package
        self.workdir = workdir
        self.stem = identifier(path.stem)

    def original(self) -> types.ModuleType:
        """The original file as a module; its package's ``__init__`` (a missing optional
        dependency, ...) failing is the model's problem, like the file's own import."""
        name = (f"{self.package}.{self.stem}" if self.package
                else f"_tsfix_original_{self.stem}")
        try:
            if self.package:
                importlib.import_module(self.package)
            return load_module(name, self.path)
        except BaseException as exc:
            raise unverified(f"importing the original failed: {short_error(exc)}") from exc

    def rewritten(self) -> tuple[types.ModuleType, dict[str, str]]:
        name = (f"{self.package}._tsfix_rewritten_{self.stem}" if self.package
                else f"_tsfix_rewritten_{self.stem}")
        rewritten_path = self.workdir / f"{self.stem}.py"
        source = self.job.source if isinstance(self.job, ValidationJob) else ""
        rewritten_path.write_text(source, encoding="utf-8")
        rename = {str(rewritten_path): f"the rewritten {self.path.name}"}
        try:
            return load_module(name, rewritten_path), rename
        except BaseException as exc:
            raise rejected(f"the rewritten file does not import: "
                           f"{short_error(exc, rename)}") from exc

    def __call__(self) -> tuple[types.ModuleType, types.ModuleType, dict[str, str]]:
        original = self.original()
        rewritten, rename = self.rewritten()
        return original, rewritten, rename


@contextlib.contextmanager
def import_context(job: Job) -> Iterator[Imports]:
    """sys.path and sys.modules set up for the job's file, and restored afterwards."""
    path = Path(job.path).resolve()
    package, root = package_of(path)
    added = [str(root), *job.sys_path]
    for entry in reversed(added):
        sys.path.insert(0, entry)
    workdir = Path(tempfile.mkdtemp(prefix="tsfix-validate-"))
    before = set(sys.modules)
    try:
        yield Imports(job, path, package, workdir)
    finally:
        # Forget the user's modules so the next job sees its own files fresh. Modules of the
        # Python installation imported meanwhile stay: torch and onnx import submodules lazily,
        # and onnx's C extension aborts the process when it is imported twice.
        forgotten = [name for name in set(sys.modules) - before
                     if not _installed(name, sys.modules.get(name))]
        for name in forgotten:
            sys.modules.pop(name, None)
        forget_overloads(forgotten)
        for entry in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)
        shutil.rmtree(workdir, ignore_errors=True)


_INSTALLATION = tuple({str(Path(p).resolve()) + os.sep for p in (
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"],
    sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])})


def _installed(name: str, module: object) -> bool:
    """A module of the Python installation (standard library, site-packages) or tsfix's own.

    Read from the module's ``__dict__``, never through attribute access: a lazy module
    (speechbrain's ``LazyModule``) imports its target on any attribute and raises when that
    fails. Such a module, which has no file of its own, belongs where its top package does."""
    if name.startswith("tsfix."):
        return True
    for candidate in (module, sys.modules.get(name.partition(".")[0])):
        try:
            file = vars(candidate).get("__file__")
        except TypeError:
            continue
        if isinstance(file, str):
            try:
                return str(Path(file).resolve()).startswith(_INSTALLATION)
            except (OSError, RuntimeError, ValueError):
                return False
    return False


def run_job(job: Job) -> Result:
    if isinstance(job, ObserveJob):
        return run_observe_job(job)
    if isinstance(job, ModelJob):
        from tsfix.codemods.validation.model import run_model_job

        return run_model_job(job)
    from tsfix.codemods.validation.verifier import validate_class

    results = []
    with import_context(job) as load:
        try:
            original, rewritten, rename = load()
        except Verdict as outcome:
            return ValidationResult(job.id, tuple(
                ClassVerdict(c.name, outcome.verdict, outcome.reason) for c in job.classes))
        for job_class in job.classes:
            codes = None
            if job.target in ("onnx", "export"):
                from tsfix.codemods.validation.export import string_codes

                codes = string_codes(job.source, job_class.name)
            results.append(validate_class(original, rewritten, job_class, rename, job.target,
                                          codes))
    return ValidationResult(job.id, tuple(results))


# ---- observed types ----------------------------------------------------------------------------
#
# Internal type terms: a string for atoms ("Tensor", "int", "float", "bool", "str", "NoneType"),
# ("List", T), ("Dict", K, V), ("Tuple", (T1, ...)), ("Optional", T). UNKNOWN stands for the
# element type of an empty container (filled in by a later non-empty one); CONFLICT for values
# TorchScript cannot type or that disagree (the parameter is then left out).
# (VARIADIC_TUPLE, T): tuples seen with different lengths (a chunk count that follows the batch
# size), all of element type T. It is spelled List[T]: TorchScript takes a Python tuple where
# List[T] is declared, as an argument from Python and as a @torch.jit.ignore method's return
# (measured, torch 2.13), while Tuple[T, T] raises for every other length. It merges with
# tuples only, never with a real list: a value that is a list in one call and a tuple in
# another stays a conflict.

UNKNOWN = "?"
VARIADIC_TUPLE = "Tuple..."
LOCAL_PREFIX = "local "    # key of a local's type at return: "local lengths"
CONFLICT = "!"
MAX_ELEMENTS = 1000        # elements of a container looked at
Term = Any                 # str | tuple[...] as above


def type_of(value: Any) -> Term:
    """The type term of one value."""
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if value is None:
        return "NoneType"
    kind = type(value)
    if kind is bool:
        return "bool"
    if kind is int:
        return "int"
    if kind is float:
        return "float"
    if kind is str:
        return "str"
    if isinstance(value, torch.device):
        return "torch.device"       # value_types.DEVICE (not imported: workers stay lean)
    if isinstance(value, torch.dtype):
        return "torch.dtype"
    if kind is list:
        element: Term = UNKNOWN
        for item in value[:MAX_ELEMENTS]:
            element = merge_types(element, type_of(item))
            if element == CONFLICT:
                return CONFLICT
        return ("List", element)
    if kind is tuple:
        elements = tuple(type_of(item) for item in value[:MAX_ELEMENTS])
        if len(value) > MAX_ELEMENTS or CONFLICT in elements:
            return CONFLICT
        return ("Tuple", elements)
    if kind is dict:
        key: Term = UNKNOWN
        item_type: Term = UNKNOWN
        for n, (k, v) in enumerate(value.items()):
            if n >= MAX_ELEMENTS:
                break
            key = merge_types(key, type_of(k))
            item_type = merge_types(item_type, type_of(v))
            if CONFLICT in (key, item_type):
                return CONFLICT
        if key not in (UNKNOWN, "str", "int", "float", "bool", "Tensor"):
            return CONFLICT
        return ("Dict", key, item_type)
    return CONFLICT


def merge_types(a: Term, b: Term) -> Term:
    """The one type two observed types agree on, or CONFLICT."""
    if a == b:
        return a
    if CONFLICT in (a, b):
        return CONFLICT
    if a == UNKNOWN:
        return b
    if b == UNKNOWN:
        return a
    if a == "NoneType":
        return b if _is_optional(b) else ("Optional", b)
    if b == "NoneType":
        return a if _is_optional(a) else ("Optional", a)
    if _is_optional(a) or _is_optional(b):
        inner = merge_types(_strip_optional(a), _strip_optional(b))
        return CONFLICT if inner == CONFLICT else ("Optional", inner)
    if {a, b} == {"int", "float"}:
        return "float"
    if isinstance(a, tuple) and isinstance(b, tuple) and a[0] == b[0]:
        if a[0] == "List":
            element = merge_types(a[1], b[1])
            return CONFLICT if element == CONFLICT else ("List", element)
        if a[0] == "Dict":
            key, item = merge_types(a[1], b[1]), merge_types(a[2], b[2])
            return CONFLICT if CONFLICT in (key, item) else ("Dict", key, item)
        if a[0] == "Tuple" and len(a[1]) == len(b[1]):
            elements = tuple(merge_types(x, y) for x, y in zip(a[1], b[1], strict=True))
            return CONFLICT if CONFLICT in elements else ("Tuple", elements)
    if isinstance(a, tuple) and isinstance(b, tuple) and {a[0], b[0]} <= {"Tuple",
                                                                         VARIADIC_TUPLE}:
        # Lengths differ (or one side already varies): one element type for all.
        shared: Term = UNKNOWN
        for side in (a, b):
            for part in (side[1],) if side[0] == VARIADIC_TUPLE else side[1]:
                shared = merge_types(shared, part)
        return CONFLICT if shared == CONFLICT else (VARIADIC_TUPLE, shared)
    return CONFLICT


def _is_optional(term: Term) -> bool:
    return isinstance(term, tuple) and term[0] == "Optional"


def _strip_optional(term: Term) -> Term:
    return term[1] if _is_optional(term) else term


def type_string(term: Term) -> str | None:
    """The TorchScript spelling of a term; None when it is unknown or conflicting."""
    if term in (UNKNOWN, CONFLICT):
        return None
    if isinstance(term, str):
        return term
    parts: list[str | None]
    if term[0] == VARIADIC_TUPLE:
        element = type_string(term[1])
        return None if element is None else f"List[{element}]"
    if term[0] == "Tuple":
        if not term[1]:
            return "Tuple[()]"
        parts = [type_string(t) for t in term[1]]
    else:
        parts = [type_string(t) for t in term[1:]]
    if any(p is None for p in parts):
        return None
    return f"{term[0]}[{', '.join(p for p in parts if p is not None)}]"


def observed_types(values: list[Any]) -> str | None:
    """The TorchScript type string for a list of observed values (None: leave it out)."""
    term: Term = UNKNOWN
    for value in values:
        term = merge_types(term, type_of(value))
    return type_string(term)


# Code object -> (class key, method name, parameters recorded, whether its return is).
Methods = dict[types.CodeType, tuple[str, str, tuple[str, ...], bool]]


class TypeRecorder:
    """Records argument and return types of chosen functions through ``sys.setprofile``.

    ``methods`` maps a code object to (class name, method name, parameters to record). On a
    'call' event the parameters are read from ``frame.f_locals``; on a 'return' event that is a
    real return (not an exception unwinding the frame) the return value is recorded."""

    def __init__(self, methods: Methods) -> None:
        self.methods = methods
        self.terms: dict[str, dict[str, dict[str, Term]]] = {}

    def record(self, cls: str, method: str, name: str, value: Any) -> None:
        slot = self.terms.setdefault(cls, {}).setdefault(method, {})
        slot[name] = merge_types(slot.get(name, UNKNOWN), type_of(value))

    def profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        found = self.methods.get(frame.f_code)
        if found is None:
            return
        cls, method, params, record_return = found
        if event == "call":
            local = frame.f_locals
            for name in params:
                if name in local:
                    self.record(cls, method, name, local[name])
        elif record_return and _really_returns(frame):
            self.record(cls, method, "return", arg)
            # Every local's last value (ignore-numpy types the names a moved block reads
            # and assigns from these; it trusts them only for names assigned once).
            code = frame.f_code
            arguments = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount
                                             + bool(code.co_flags & inspect.CO_VARARGS)
                                             + bool(code.co_flags & inspect.CO_VARKEYWORDS)])
            for name, value in frame.f_locals.items():
                if name not in arguments and name not in code.co_freevars:
                    self.record(cls, method, LOCAL_PREFIX + name, value)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        previous = sys.getprofile()
        sys.setprofile(self.profile)
        try:
            yield
        finally:
            sys.setprofile(previous)

    def merge_into(self, other: TypeRecorder) -> None:
        for cls, methods in self.terms.items():
            for method, params in methods.items():
                slot = other.terms.setdefault(cls, {}).setdefault(method, {})
                for name, term in params.items():
                    slot[name] = merge_types(slot.get(name, UNKNOWN), term)

    def strings(self) -> dict[str, dict[str, dict[str, str]]]:
        found: dict[str, dict[str, dict[str, str]]] = {}
        for cls, methods in self.terms.items():
            for method, params in methods.items():
                typed = {name: text for name, term in params.items()
                         if (text := type_string(term)) is not None}
                if typed:
                    found.setdefault(cls, {})[method] = typed
        return found


def _really_returns(frame: types.FrameType) -> bool:
    """A 'return' profile event also fires when an exception leaves the frame; only a return
    instruction at the frame's last instruction is a real return."""
    try:
        opname = dis.opname[frame.f_code.co_code[frame.f_lasti]]
    except (IndexError, ValueError):
        return False
    return opname.startswith("RETURN_")


_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def methods_to_observe(cls: type, module: types.ModuleType) -> Methods:
    """Code objects of the methods of ``cls`` and of its bases defined at the top level of the
    same file (what forward can reach), recorded under the class that defines each one, and of
    the file's module-level functions, recorded under OBSERVED_FUNCTIONS."""
    found = {}
    for base in cls.__mro__:
        if (base.__module__ != module.__name__ or base.__qualname__ != base.__name__
                or getattr(module, base.__name__, None) is not base):
            continue
        if module.__file__ is not None:
            found.update(class_methods(base, base.__name__, module.__file__))
    if module.__file__ is not None:
        for code, entry in module_functions(module, OBSERVED_FUNCTIONS, module.__file__).items():
            found.setdefault(code, entry)
    return found


def class_methods(cls: type, key: str, file: str) -> Methods:
    """Code objects of the methods ``cls`` defines in ``file``, each recorded under ``key``
    (with its parameters after ``self`` and whether its return is recorded)."""
    found: Methods = {}
    for method_name, member in vars(cls).items():
        function = member.__func__ if isinstance(member, staticmethod | classmethod) else member
        if not isinstance(function, types.FunctionType):
            continue
        with contextlib.suppress(ValueError):
            function = inspect.unwrap(function)
        code = getattr(function, "__code__", None)
        if not isinstance(code, types.CodeType) or code.co_filename != file:
            continue
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if not isinstance(member, staticmethod):
            names = names[1:]
        found[code] = (key, method_name, tuple(names), not code.co_flags & _GENERATOR_FLAGS)
    return found


def module_functions(module: types.ModuleType, key: str, file: str) -> Methods:
    """The module-level functions defined in ``file`` (compiled methods call them; annotate
    types them), each recorded under ``key``."""
    found = {}
    for function_name, member in list(vars(module).items()):
        if not isinstance(member, types.FunctionType) or member.__name__ != function_name:
            continue
        with contextlib.suppress(ValueError):
            member = inspect.unwrap(member)
        code = getattr(member, "__code__", None)
        if not isinstance(code, types.CodeType) or code.co_filename != file:
            continue
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        found[code] = (key, function_name, tuple(names), not code.co_flags & _GENERATOR_FLAGS)
    return found


def observe_class(module: types.ModuleType, job_class: ObserveClass) -> TypeRecorder:
    """Build every configuration of one class and run its examples, recording types."""
    name = job_class.name
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise unverified(f"class {name} is not defined at module level")
    recorder = TypeRecorder(methods_to_observe(cls, module))
    for inst in instances(job_class.example):
        try:
            with recorder.active():
                instance = build(cls, inst.init)
        except BaseException as exc:
            raise unverified(f"the original constructor raised for "
                             f"{inst.label(show_init=True)}: {short_error(exc)}") from exc
        for j, (args, kwargs) in enumerate(inst.calls):
            try:
                with recorder.active():
                    call(instance, args, kwargs)
            except BaseException as exc:
                raise unverified(f"the original forward raised for {inst.label(j)}: "
                                 f"{short_error(exc)}") from exc
        observe_other_batch(recorder, instance, inst)
    return recorder


def observe_other_batch(recorder: TypeRecorder, module: Any, inst: Instance) -> None:
    """Types seen in configuration ``inst``'s first call at the second batch size
    (:class:`OtherBatch`) merged into ``recorder``: a tuple whose length follows the batch
    size then differs between the two runs and is typed ``List[T]``, not the one arity the
    example showed. A run that raises (the batch axis is not free) adds nothing."""
    batch = other_batch(*inst.calls[0]) if inst.calls else None
    if batch is None:
        return
    seen = TypeRecorder(recorder.methods)
    try:
        with seen.active():
            call(module, batch.args, batch.kwargs)
    except BaseException:
        return
    seen.merge_into(recorder)


def run_observe_job(job: ObserveJob) -> ObservationResult:
    """Types seen in eager runs of the original file's examples: ``observed`` (class ->
    method -> parameter or "return" -> type) and ``failures`` (class -> why it has none)."""
    merged = TypeRecorder({})
    failures: dict[str, str] = {}
    with import_context(job) as load:
        try:
            original = load.original()
        except Verdict as outcome:
            return ObservationResult(job.id, {},
                                     {c.name: outcome.reason for c in job.classes})
        for job_class in job.classes:
            try:
                observe_class(original, job_class).merge_into(merged)
            except Verdict as outcome:
                failures[job_class.name] = outcome.reason
            except BaseException as exc:
                failures[job_class.name] = f"observation error: {short_error(exc)}"
    return ObservationResult(job.id, merged.strings(), failures)


def main() -> None:
    # Results go to the stdout we were started with; anything user code prints goes to stderr.
    results = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # A segfault or abort in the model prints the Python stack to stderr before the worker
    # dies: the pool's verdict names the model's function and line from it.
    faulthandler.enable(sys.stderr)
    torch.set_num_threads(int(os.environ.get("TSFIX_WORKER_THREADS", "1")))
    results.write(encode(READY) + "\n")
    results.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        data = json.loads(line)
        result: Result
        try:
            result = run_job(job_from_json(data))
        except BaseException:
            result = JobFailure(data.get("id"), traceback.format_exc(limit=5))
        results.write(encode(result) + "\n")
        results.flush()


if __name__ == "__main__":
    # Run as the importable module, not as __main__: model.py and export.py import this module,
    # and one copy of it means one Verdict class (a Verdict raised there is caught here).
    from tsfix.codemods.validation import worker

    worker.main()
