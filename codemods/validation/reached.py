"""The verifier's steps (:mod:`tsfix.codemods.validation.verifier`) for a class a configured
model reaches (a model job's case, :class:`~tsfix.codemods.validation.case.ReachedCase`): the
instances of the class the model holds, each on the calls the model's run made on it.

In order: the original instances alone reproduce their recorded outputs (else unverified: the
recording proves nothing); ``eager parity`` of every rewritten instance on its inputs; which
instances one artifact must serve (:func:`artifact_scope`); ``one artifact (eager)``; then for
``torchscript`` ``re-script`` (:func:`rescript_reached`), ``one artifact``, ``save/load``;
for ``export`` the export steps (:func:`tsfix.codemods.validation.export.check_reached`). Every
reason starts ``from model <file>:<Class>`` or names the model in the failing call's words.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tsfix.codemods.validation.case import Pair, ReachedCase, literal
from tsfix.codemods.validation.model import class_origin
from tsfix.codemods.validation.verifier import (
    EXPORT_OTHER_BATCH,
    Check,
    load_weights,
    not_scripting,
    plain_settings,
    reproduces,
    save_load_step,
)
from tsfix.codemods.validation.worker import (
    Verdict,
    call,
    difference,
    script,
    short_error,
    unverified,
)


def check_reached_class(case: ReachedCase) -> str:
    """A verified reason, or raises :class:`~tsfix.codemods.validation.worker.Verdict`."""
    called = recorded_instances(case)
    originals_alone(case, called)
    ml = literal(case.model_label)
    eager = Check(f"eager parity: the rewritten {{label}} raised on its inputs from model {ml}: "
                  "{error}", f"eager parity: {{found}} for {{label}} (inputs from model {ml})",
                  case.rename)
    for p in called:
        reproduces(p.new, case.calls(p), eager)
    candidates = artifact_scope(case, called)
    first = case.first
    assert first is not None
    # One artifact, eagerly: a copy of the first rewritten instance, given each instance's
    # weights and lifted settings, reproduces it (decided even when the class does not script).
    try:
        eager_copy = copy.deepcopy(first.new)
    except BaseException:
        eager_checked, served = False, candidates
        eager_note = "one artifact not checked eagerly (the instance cannot be copied)"
    else:
        eager_checked = True
        served = serve(case, eager_copy, "one artifact (eager)", candidates)
        eager_note = f"one artifact served {len(served)} of {len(called)} calls in eager mode"
    head = f"from model {case.model_label}: {len(called)} instance(s) on their real inputs: "
    if case.target == "export":
        from tsfix.codemods.validation.export import check_reached

        return head + (f"eager parity, {eager_note}, {check_reached(case, served)}"
                       f"{reached_at_other_batch(called, EXPORT_OTHER_BATCH)}"
                       f"{not_comparable(case)}")
    return head + scripted_steps(case, served, eager_checked, eager_note)


def scripted_steps(case: ReachedCase, served: list[Pair], eager_checked: bool, eager_note: str
                   ) -> str:
    """The torchscript target after the eager steps: re-script, one artifact, save/load; the
    verified reason after its head."""
    called, first = case.called, case.first
    assert first is not None
    artifact = rescript_reached(case, first, eager_note)
    served = serve(case, artifact, "one artifact", served, lenient=not eager_checked)
    loaded, save_step = save_load_step(artifact, case.model_class.python_only, case.rename,
                                       first.seen.module)
    if loaded is not None:
        # Without an instance the artifact serves (every one a subclass with a forward of its
        # own), the first instance checks the loaded copy of itself.
        serve(case, loaded, "save/load", served or [first], lenient=False,
              with_lifted=bool(served))
    summary = (f"eager parity, re-script, one artifact served {len(served)} of {len(called)}, "
               f"{save_step}{reached_at_other_batch(called, 'eager parity, re-script')}")
    never = case.never
    if never:
        summary += (f"; {len(never)} other instance(s) never called "
                    f"({', '.join(case.where(p) for p in never[:3])})")
    return summary + not_comparable(case)


def not_comparable(case: ReachedCase) -> str:
    return f" (not comparable: {case.notes})" if case.notes else ""


def recorded_instances(case: ReachedCase) -> list[Pair]:
    """The instances the model's run called (with recorded calls); unverified when none was."""
    called = case.called
    if called:
        return called
    never = case.never
    why = next((p.seen.not_recorded for p in never if p.seen.not_recorded), None)
    where = ", ".join(case.where(p) for p in never[:3])
    if why:
        raise unverified(f"from model {case.model_label}: the inputs of its {len(case.pairs)} "
                         f"instance(s) ({where}) were not recorded: {why}")
    raise unverified(f"from model {case.model_label}: the model holds {len(case.pairs)} "
                     f"instance(s) of {case.model_class.name} ({where}), and its examples "
                     "never call them (a call through .forward() directly is not seen)")


def originals_alone(case: ReachedCase, called: list[Pair]) -> None:
    """Each original instance alone on its recorded inputs reproduces its recorded output;
    else the recording proves nothing (unverified)."""
    for p in called:
        for j, recorded in enumerate(p.seen.calls):
            where = case.where(p, j)
            try:
                again = call(p.seen.module, recorded.args, recorded.kwargs)
            except BaseException as exc:
                raise unverified(f"from model {case.model_label}: the original {where} raises "
                                 f"when called alone on its recorded inputs: "
                                 f"{short_error(exc)}") from exc
            if difference(recorded.output, again) is not None:
                raise unverified(f"from model {case.model_label}: the original {where} gives "
                                 "other outputs when called again on its recorded inputs "
                                 "(nondeterministic or stateful)")


def artifact_scope(case: ReachedCase, called: list[Pair]) -> list[Pair]:
    """Which instances one artifact must serve: those with the first's parameter shapes. One
    that also differs in a setting that is not lifted is served when it can be; when it
    cannot, that setting explains it (not comparable), as a class job decides. With lifted
    arguments, only instances that run this class's forward take them (a subclass may define
    a forward of its own). The artifact is the first instance of the largest group with equal
    weight shapes (``case.first``; the check then covers the most instances). Returns the
    candidates: the instances with its parameter shapes."""
    lifted = dict(case.model_class.lifted)
    key = (str(Path(case.model_class.path).resolve()), case.model_class.name)
    lifting = [p for p in called
               if not lifted or _forward_owner(type(p.new), case.rename) == key]
    for p in called:
        if p not in lifting:
            case.notes.add("of a subclass with a forward of its own", case.where(p))
    groups: dict[str, list[Pair]] = {}
    for p in lifting:
        groups.setdefault(repr(sorted(_shapes(p.seen.module).items())), []).append(p)
    first = case.first = max(groups.values(), key=len)[0] if groups else called[0]
    base_shapes = _shapes(first.seen.module)
    base_settings = settings_of(first.new, set(lifted.values()))
    candidates = []
    for p in lifting:
        if _shapes(p.seen.module) != base_shapes:
            case.notes.add("with other parameter shapes", case.where(p))
            continue
        settings = settings_of(p.new, set(lifted.values()))
        differing = sorted(k for k in settings.keys() | base_settings.keys()
                           if settings.get(k) != base_settings.get(k))
        if differing:
            case.excusable[id(p)] = ", ".join(differing[:3])
        candidates.append(p)
    return candidates


def serve(case: ReachedCase, module: Any, step: str, serving: list[Pair], *,
          lenient: bool = True, with_lifted: bool = True) -> list[Pair]:
    """One artifact: ``module``, given each instance's weights (and lifted settings),
    reproduces its recorded calls; the instances it serves. ``lenient``: one that also differs
    in a setting that is not lifted is left out (not comparable) instead of rejected. A
    scripted module shares its parameters with the instance it was scripted from (a module of
    the rewritten model, which the model verdict still runs): they are put back."""
    check = Check(f"{step}: raised for {{label}} with {{values}}: {{error}}",
                  f"{step}: {{found}} for {{label}} called with {{values}}", case.rename)
    kept = {key: value.detach().clone() for key, value in module.state_dict().items()}
    served = []
    try:
        for p in serving:
            values = case.values(p) if with_lifted else {}
            load_weights(module, p.seen.module.state_dict())
            try:
                reproduces(module, case.calls(p), check, values)
            except Verdict:
                if not (lenient and id(p) in case.excusable):
                    raise
                case.notes.add("also differing in a setting that is not lifted",
                               f"{case.where(p)}: {case.excusable[id(p)]}")
                continue
            served.append(p)
    finally:
        module.load_state_dict(kept)
    return served


def rescript_reached(case: ReachedCase, first: Pair, eager_note: str) -> Any:
    """Re-script: every called instance's outputs from a scripted module; the first
    instance's. Instances alike in weight shapes and settings share one scripted instance
    given their weights (TorchScript compiles one type for them); one it does not reproduce
    is scripted itself."""
    check = Check("re-script: the scripted {label} raised: {error}",
                  "re-script: {found} for {label}", case.rename)
    first_artifact = None
    alike: dict[str, Any] = {}
    for p in [first, *(q for q in case.called if q is not first)]:
        signature = _signature(p)
        shared = alike.get(signature)
        if shared is not None and _reproduces(shared, p):
            continue
        try:
            artifact = script(p.new)
        except BaseException as exc:
            raise not_scripting(exc, p.seen.module, case.rename, eager_note,
                                f" (inputs from model {case.model_label})") from exc
        reproduces(artifact, case.calls(p), check)
        first_artifact = artifact if first_artifact is None else first_artifact
        alike.setdefault(signature, artifact)
    return first_artifact


def reached_at_other_batch(called: list[Pair], steps: str) -> str:
    """The verified reason's words for the calls recorded in the model's run at the second
    batch size (checked with the others)."""
    sizes = sorted({c.batch for p in called for c in p.seen.calls if c.batch is not None})
    if not sizes:
        return ""
    count = sum(c.batch is not None for p in called for c in p.seen.calls)
    return (f"; at batch size {', '.join(map(str, sizes))} too: {steps} ({count} call(s) from "
            "the model's run at that size)")


def _signature(p: Pair) -> str:
    """Weight shapes, settings and container attributes of an instance: equal signatures,
    same scripted type."""
    extra = {}
    for prefix, sub in p.new.named_modules():
        for key, value in vars(sub).items():
            if not key.startswith("_") and isinstance(value, list | dict) and len(value) <= 64:
                extra[f"{prefix}.{key}"] = repr(value)[:2000]
    return repr((sorted(_shapes(p.seen.module).items()),
                 sorted(settings_of(p.new, set()).items(), key=lambda item: item[0]),
                 sorted(extra.items())))


def _reproduces(shared: Any, p: Pair) -> bool:
    """``shared`` (a scripted instance alike ``p``), given ``p``'s weights, gives ``p``'s
    recorded outputs; its own weights are put back."""
    kept = {key: value.detach().clone() for key, value in shared.state_dict().items()}
    try:
        load_weights(shared, p.seen.module.state_dict())
        for recorded in p.seen.calls:
            if difference(recorded.output, call(shared, recorded.args, recorded.kwargs)):
                return False
        return True
    except Exception:
        return False
    finally:
        shared.load_state_dict(kept)


def settings_of(module: torch.nn.Module, skip: set[str]) -> dict[str, Any]:
    """What besides weights can make two instances of a class compute differently: scalar
    attributes (worker.plain_settings), tuples and lists of them (a convolution's dilation, an
    axial permutation), the class of every submodule, and plain functions held as
    attributes."""
    found = plain_settings(module, skip)
    for prefix, sub in module.named_modules():
        found[f"{prefix}.<class>"] = type(sub).__qualname__
        for key, value in vars(sub).items():
            name = f"{prefix}.{key}" if prefix else key
            if key.startswith("_") or name in skip:
                continue
            if (isinstance(value, tuple | list) and len(value) <= 16
                    and all(isinstance(v, bool | int | float | str) for v in value)):
                found[name] = tuple(value)
            elif isinstance(value, types.FunctionType | types.BuiltinFunctionType):
                found[name] = getattr(value, "__qualname__", repr(value))
    return found


def _forward_owner(cls: type, rename: Mapping[str, str]) -> tuple[str, str] | None:
    """The class that defines the ``forward`` instances of ``cls`` run."""
    owner = next((c for c in cls.__mro__ if "forward" in vars(c)), None)
    return class_origin(owner, rename) if owner is not None else None


def _shapes(module: torch.nn.Module) -> dict[str, Any]:
    return {key: value.shape for key, value in module.state_dict().items()}
