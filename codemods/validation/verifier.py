"""The verifier: every case of a rewrite checked by one ordered list of steps per target.

A **case** is what is compared: instances of the original class and of its rewrite, the calls
made on them and the original's outputs (:mod:`~tsfix.codemods.validation.case`). Its sources:

- the example table of a class job (:func:`~tsfix.codemods.validation.worker.instances`):
  every ``init`` built, each called with every call; a *configuration* is one init with one
  call (:class:`~tsfix.codemods.validation.case.ClassCase`);
- guessed inputs (an automatic example, :func:`~tsfix.codemods.validation.worker.
  automatic_instance`): the class built with its defaults, called on an input its first layer
  fixes (a ``ClassCase`` too);
- calls recorded from a configured model (:mod:`~tsfix.codemods.validation.model`): every
  instance of the class the model holds, on the inputs it got in the model's run
  (:class:`~tsfix.codemods.validation.case.ReachedCase`, run by :mod:`~tsfix.codemods.
  validation.reached`).

A **target** is what the rewrite must compile to: ``torchscript`` (``torch.jit.script``),
``onnx`` (the legacy exporter over the scripted artifact, :mod:`~tsfix.codemods.validation.
onnx_export`), ``export`` (``torch.export``, then the dynamo ONNX exporter when installed,
:mod:`~tsfix.codemods.validation.export`).

A **step** is a function with one job and one failure message: it returns to go on, or raises
:class:`~tsfix.codemods.validation.worker.Verdict`, which ends the case. A verdict's reason
starts with the step's name (after "at batch size N: " for the second batch size, after
"from model <file>:<Class>: " for some reached-class reasons). Outputs are compared by one
step function, :func:`reproduces`, which each step gives its words (:class:`Check`).

The steps, in order (reason prefix: function):

1. ``build``: the original and the rewritten class built with the same seed, the original's
   ``state_dict`` copied into the rewrite, eval mode (:func:`eager_parity`; a failing original
   is ``unverified``: "the original constructor/forward raised", "nondeterministic model");
2. ``eager parity``: the rewrite's eager outputs equal the original's for every call, and for
   each configuration's first call at a second batch size (:func:`eager_parity`,
   :func:`at_other_batch`, :class:`~tsfix.codemods.validation.worker.OtherBatch`);
3. ``one artifact (eager)``: the instance built from the first configuration, given each
   served configuration's weights and lifted settings, reproduces it (:func:`serve`;
   :func:`served_configs` says which configurations it must serve, ``one artifact: ... a
   structural setting``); it needs no compiler, so it decides for a class that does not
   compile too;
4. target ``torchscript`` and ``onnx`` (:func:`compiled_steps`): ``re-script``
   (:func:`rescript_each`; a rewrite that does not script is rejected only when the original
   scripts, else "not scriptable either", :func:`not_scripting`), ``one artifact`` (the first
   scripted module serves every served configuration), ``save/load``
   (:func:`save_load_step`), and for ``onnx`` ``onnx`` (:func:`check_onnx`);
   target ``export`` (:func:`tsfix.codemods.validation.export.check_export`): ``export``,
   ``save/load``, ``onnx`` (dynamo), then the ``torch.cond`` sides.

A reached class runs the same steps on the model's instances (:func:`tsfix.codemods.
validation.reached.check_reached_class`). Outputs match when every tensor is ``allclose``
with rtol 1e-4, atol 1e-5.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import time
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch
from tsfix.codemods.validation.case import ClassCase, Expected
from tsfix.codemods.validation.protocol import (
    NOT_SCRIPTABLE_EITHER,
    STOPS_WHERE_THE_ORIGINAL_STOPS,
    UNVERIFIED,
    VERIFIED,
    ClassVerdict,
    JobClass,
    VerdictName,
)
from tsfix.codemods.validation.worker import (
    COULD_NOT_INFER,
    PYTHON_ONLY_SAVE,
    SEED,
    Instance,
    OtherBatch,
    Verdict,
    add_table,
    build,
    call,
    difference,
    instances,
    other_batch,
    rejected,
    script,
    short_error,
    unverified,
)


@dataclass(frozen=True)
class Check:
    """How a comparison step's failure reads: ``raised`` (fields ``{label}``, ``{error}``) when
    the module raises, ``differs`` (``{label}``, ``{found}``) when an output differs; both may
    name the lifted settings given (``{values}``: the dict, ``{with_values}``: " with {...}"
    or nothing). ``error`` writes the exception in one line with the ``rename``d files;
    ``around`` is entered around each call (the torch.cond recorder, the exporter's
    silencing)."""

    raised: str
    differs: str
    rename: dict[str, str]
    error: Callable[[BaseException, dict[str, str]], str] = short_error
    around: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


def reproduces(module: Any, calls: Iterable[Expected], check: Check,
               extra: dict[str, Any] | None = None) -> None:
    """The comparison step: ``module`` (called with ``extra`` keyword arguments too, the
    lifted settings) gives the original's output for every call, else rejected."""
    values = extra or {}
    for label, args, kwargs, want in calls:
        words = {"label": label, "values": values, "with_values": with_settings(values)}
        try:
            with check.around():
                got = call(module, args, kwargs, extra)
        except BaseException as exc:
            error = check.error(exc, check.rename)
            raise rejected(check.raised.format(error=error, **words)) from exc
        found = difference(want, got)
        if found:
            raise rejected(check.differs.format(found=found, **words))


def with_settings(values: dict[str, Any]) -> str:
    """`` with {setting: value}`` (0-d tensors as their values), or nothing."""
    if not values:
        return ""
    shown = {name: value.item() if isinstance(value, torch.Tensor) else value
             for name, value in values.items()}
    return f" with {shown}"


def not_scripting(exc: BaseException, original_instance: torch.nn.Module,
                  rename: dict[str, str], eager_served: str, where: str = "") -> Verdict:
    """The verdict for a rewrite that does not script, decided by what can be measured: the
    original instance scripts, so the rewrite breaks what compiled (rejected); or it does not
    script either, and the rewrite, whose eager parity already holds, is no regression
    (unverified, with the rewrite's error). Which of the original's errors TorchScript reports
    first decides nothing: a rewrite that gets past one error stops at the next one, which may
    be new or may have been there all along, and guessing which made a second run on the
    written tree decide otherwise than the first. ``where`` ends both reasons."""
    error = short_error(exc, rename)
    try:
        script(original_instance)
    except BaseException as original_exc:
        same = (f" {STOPS_WHERE_THE_ORIGINAL_STOPS}"
                if _stop(exc, rename) == _stop(original_exc, {}) else "")
        return unverified(f"{NOT_SCRIPTABLE_EITHER} this rewrite: the class still does not "
                          f"script{same}: {error} (the original fails with: "
                          f"{short_error(original_exc)}); {eager_served}{where}")
    return rejected(f"re-script: {error}{where}")


_FRAME_LINE = re.compile(r'^\s*File "[^"]*", line \d+\s*$', re.MULTILINE)
_CALLED_FROM = " is being compiled since it was called from "


def _stop(exc: BaseException, rename: dict[str, str]) -> str:
    """Where TorchScript stopped, paths and line numbers aside: the error's type, its message
    and the code it quotes at the site (a rule that changed the code there changes the quote),
    without the chain of callers that led there (a rule that changed a caller got no further)."""
    text = str(exc).split(_CALLED_FROM, 1)[0]
    for temp, real in rename.items():
        text = text.replace(temp, real)
    lines = (line.strip() for line in _FRAME_LINE.sub("", text).splitlines())
    return "\n".join([type(exc).__name__, *filter(None, lines)])


def plain_settings(module: torch.nn.Module, skip: set[str]) -> dict[str, Any]:
    """Scalar attributes of a module tree: what else must agree for one artifact to serve two
    configurations."""
    found = {}
    for prefix, sub in module.named_modules():
        if isinstance(sub, torch.nn.modules.dropout._DropoutNd):
            continue  # p and inplace change nothing in eval mode, where validation runs
        for key, value in vars(sub).items():
            name = f"{prefix}.{key}" if prefix else key
            if (isinstance(value, bool | int | float | str) and not key.startswith("_")
                    and key != "training" and name not in skip):
                found[name] = value
    return found


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same type (an init value may be a tensor or a custom object)."""
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:
        return a is b


def only_lifted_init(base: dict[str, Any], other: dict[str, Any], base_module: Any,
                     other_module: Any, lifted: dict[str, str]) -> bool:
    """``other``'s init differs from ``base``'s, and only in arguments that feed a lifted
    attribute: named like the attribute or its parameter, or given as the attribute's value in
    both instances."""
    differing = [key for key in base.keys() | other.keys()
                 if key not in base or key not in other or not _same(base[key], other[key])]
    if not differing:
        return False
    missing = object()
    for key in differing:
        if key not in base or key not in other:
            return False
        if key in lifted or key in lifted.values():
            continue
        if not any(_same(getattr(base_module, attr, missing), base[key])
                   and _same(getattr(other_module, attr, missing), other[key])
                   for attr in lifted.values()):
            return False
    return True


# ---- a class job's case ------------------------------------------------------------------------

def validate_class(original: types.ModuleType, rewritten: types.ModuleType,
                   job_class: JobClass, rename: dict[str, str], target: str = "torchscript",
                   codes: dict[str, dict[str, int]] | None = None) -> ClassVerdict:
    """One class's verdict. ``codes`` (the onnx and export targets): attribute -> {string: int
    code} of the str settings lift-branch turned into int codes."""
    started = time.perf_counter()
    verdict: VerdictName
    try:
        notes = check_class(ClassCase(original, rewritten, job_class, rename, target,
                                      codes or {}))
        verdict, reason = VERIFIED, notes
    except Verdict as outcome:
        verdict, reason = outcome.verdict, outcome.reason
    except BaseException as exc:
        verdict, reason = UNVERIFIED, f"validation error: {short_error(exc, rename)}"
    return ClassVerdict(job_class.name, verdict, reason,
                        round(time.perf_counter() - started, 3))


def check_class(case: ClassCase) -> str:
    """The steps of a class job in order (the module docstring lists them); the verified
    reason, or raises :class:`~tsfix.codemods.validation.worker.Verdict`."""
    name = case.job_class.name
    original_cls = getattr(case.original, name, None)
    rewritten_cls = getattr(case.rewritten, name, None)
    if original_cls is None or rewritten_cls is None:
        raise unverified(f"class {name} is not defined at module level")
    case.configs = instances(case.job_class.example, original_cls)
    if case.target == "export":
        # The export target proves both sides of every torch.cond the rewritten file calls:
        # the eager runs record each call site's predicate values.
        from tsfix.codemods.validation.export import CondRecorder

        case.conds = CondRecorder(case.rewritten)
    for k in range(len(case.configs)):
        eager_parity(case, k, (original_cls, rewritten_cls))
    case.served, case.notes = served_configs(case)
    one_artifact_eager(case, rewritten_cls)
    if case.target == "export":
        from tsfix.codemods.validation.export import check_export

        case.first.load_state_dict(case.originals[0].state_dict())
        return check_export(case) + other_batch_note(case.varied, EXPORT_OTHER_BATCH)
    return compiled_steps(case)


def compiled_steps(case: ClassCase) -> str:
    """The torchscript (and onnx) target's steps after the eager ones: re-script, one
    artifact, save/load, onnx."""
    scripted = rescript_each(case)
    artifact = scripted[0]
    serve(case, artifact, "one artifact")
    loaded, save_step = save_load_step(artifact, case.job_class.python_only, case.rename,
                                       case.originals[0])
    if loaded is not None:
        serve(case, loaded, "save/load")
    onnx_step = ""
    if case.target == "onnx":
        if case.job_class.python_only and save_step.startswith("save fails"):
            raise rejected(f"onnx: cannot export: {PYTHON_ONLY_SAVE}, and the exporter "
                           "needs the whole forward in TorchScript")
        artifacts = [(artifact, case.values(k)) if k in case.served else (scripted[k], {})
                     for k in range(len(case.configs))]
        onnx_step = "; " + check_onnx(case, artifacts)
    served_calls = sum(len(case.configs[k].calls) for k in case.served)
    return verified_summary(
        case.configs, f"eager parity, re-script, {save_step}; one artifact served "
        f"{served_calls} of {case.n_calls}{onnx_step}"
        f"{other_batch_note(case.varied, 'eager parity, re-script')}", case.notes)


def verified_summary(configs: list[Instance], steps: str, notes: list[str]) -> str:
    """A class job's verified reason: how many configurations held ``steps``, the guessed input
    they ran on, and which configurations were not comparable (``notes``)."""
    n_calls = sum(len(inst.calls) for inst in configs)
    shape = (f" ({len(configs)} init x {n_calls // len(configs)} calls)"
             if any(inst.many_calls for inst in configs) else "")
    summary = f"{n_calls} configuration(s){shape}: {steps}"
    if configs[0].guessed:
        summary = f"guessed input {configs[0].guessed}; {summary}"
    if notes:
        summary += f" (not comparable: {'; '.join(notes)})"
    return summary


# ---- the steps of a class job ------------------------------------------------------------------

def built(cls: type, inst: Instance, case: ClassCase) -> Any:
    """Step 1 for the rewritten class: built for ``inst``, else rejected."""
    try:
        return build(cls, inst.init)
    except BaseException as exc:
        raise rejected(f"build: the rewritten class fails for {inst.label(show_init=True)}: "
                       f"{short_error(exc, case.rename)}") from exc


def original_output(orig: Any, inst: Instance, j: int, example_key: str) -> Any:
    """The original's output for call ``j`` of ``inst``; unverified when it raises (a guessed
    input that does not run says so) or when two identical calls differ."""
    args, kwargs = inst.calls[j]
    label = inst.label(j, show_init=True)
    try:
        want = call(orig, args, kwargs)
    except BaseException as exc:
        if inst.guessed:
            raise unverified(f"{COULD_NOT_INFER}: the guessed input ({inst.guessed}) "
                             f"fails in the original: {short_error(exc)}; "
                             f"{add_table(example_key)}") from exc
        raise unverified(f"the original forward raised for {label}: "
                         f"{short_error(exc)}") from exc
    if difference(want, call(orig, args, kwargs)) is not None:
        raise unverified(f"nondeterministic model: two identical calls differ for {label}")
    return want


def eager_parity(case: ClassCase, k: int, classes: tuple[type, type]) -> None:
    """Steps 1-2 for configuration ``k``: both classes built (the rewrite given the original's
    weights), the rewrite's eager outputs equal to the original's for every call and for the
    first call at a second batch size. The torch.cond recorder (export target) records the
    rewrite's calls."""
    inst = case.configs[k]
    if case.conds is not None:
        case.conds.config = inst.index
    try:
        orig = build(classes[0], inst.init)
    except BaseException as exc:
        raise unverified(f"the original constructor raised for {inst.label(show_init=True)}: "
                         f"{short_error(exc)}") from exc
    new = built(classes[1], inst, case)
    try:
        new.load_state_dict(orig.state_dict())
    except BaseException as exc:
        raise rejected(f"build: the rewritten class fails for {inst.label(show_init=True)}: "
                       f"{short_error(exc, case.rename)}") from exc
    check = Check("eager parity: the rewritten forward raised for {label}: {error}",
                  "eager parity: {found} for {label}", case.rename, around=case.recording)
    wanted = []
    for j, (args, kwargs) in enumerate(inst.calls):
        want = original_output(orig, inst, j, case.job_class.example.key)
        reproduces(new, [(inst.label(j, show_init=True), args, kwargs, want)], check)
        wanted.append(want)
    case.expected.append(wanted)
    batch = other_batch(*inst.calls[0]) if inst.calls else None
    if batch is not None and batch.run_original(orig):
        at_other_batch(new, batch, replace(check, around=contextlib.nullcontext),
                       inst.label(0))
    case.varied.append(batch)
    case.originals.append(orig)
    case.rewrites.append(new)


def load_weights(module: Any, weights: dict[str, Any]) -> None:
    """``module.load_state_dict(weights)``, where a scripted module may also list its
    non-persistent buffers (torch 2.13 keeps no persistent flag once scripted), which the
    eager original's weights lack: only those may be missing."""
    missing, unexpected = module.load_state_dict(weights, strict=False)
    buffers = {name for name, _ in module.named_buffers()}
    if unexpected or set(missing) - buffers:
        module.load_state_dict(weights)         # raises, with torch's message


def serve(case: ClassCase, module: Any, step: str) -> None:
    """One artifact: ``module``, given each served configuration's weights and lifted
    settings, reproduces that configuration (``step`` names the artifact's form)."""
    check = Check(f"{step}: raised for {{label}} with {{values}}: {{error}}",
                  f"{step}: {{found}} for {{label}} called with {{values}}", case.rename,
                  around=case.recording)
    for k in case.served:
        load_weights(module, case.originals[k].state_dict())
        if case.conds is not None:
            case.conds.config = k
        reproduces(module, case.calls(k), check, case.values(k))


def one_artifact_eager(case: ClassCase, rewritten_cls: type) -> None:
    """Step 3: the instance built from the first configuration serves every served one in
    eager mode. Needs no compiler, so it decides also for a class that does not compile."""
    case.first = built(rewritten_cls, case.configs[0], case)
    serve(case, case.first, "one artifact (eager)")
    served_calls = sum(len(case.configs[k].calls) for k in case.served)
    case.eager_served = (f"one artifact served {served_calls} of {case.n_calls} calls in eager "
                         "mode")


def rescript_each(case: ClassCase) -> list[Any]:
    """Step 4 (torchscript, onnx): every configuration's rewrite scripted and reproducing the
    original's outputs, at the second batch size too."""
    check = Check("re-script: the scripted module raised for {label}: {error}",
                  "re-script: {found} for {label}", case.rename)
    scripted = []
    for k, new in enumerate(case.rewrites):
        try:
            artifact = script(new)
        except BaseException as exc:
            raise not_scripting(exc, case.originals[k], case.rename,
                                case.eager_served) from exc
        reproduces(artifact, case.calls(k), check)
        at_other_batch(artifact, case.varied[k], check, case.configs[k].label(0))
        scripted.append(artifact)
    return scripted


def served_configs(case: ClassCase) -> tuple[list[int], list[str]]:
    """Step 3's scope: the configurations one artifact must serve, and why each other one is
    not comparable.

    Served: those with the first one's parameter shapes and settings apart from the lifted
    attributes, and those whose init differs from the first only in what feeds a lifted
    attribute (the other settings they differ in are derived from it: evidence that the lift
    cannot serve them, not a reason to skip them)."""
    configs, originals, rewrites, lifted = case.configs, case.originals, case.rewrites, case.lifted
    notes: list[str] = []
    base_settings = plain_settings(rewrites[0], set(lifted.values()))
    base_shapes = {k: v.shape for k, v in originals[0].state_dict().items()}
    served = []
    for k, inst in enumerate(configs):
        shapes = {key: v.shape for key, v in originals[k].state_dict().items()}
        settings = plain_settings(rewrites[k], set(lifted.values()))
        differing = sorted(key for key in settings if settings[key] != base_settings.get(key))
        derived = k > 0 and lifted and only_lifted_init(configs[0].init, inst.init,
                                                         rewrites[0], rewrites[k], lifted)
        if shapes != base_shapes:
            if derived:
                raise rejected(f"one artifact: {inst.label()} differs from init[0] only in the "
                               f"lifted {', '.join(sorted(lifted))} and has other parameters "
                               "or shapes: one instance cannot serve both (a structural "
                               "setting)")
            notes.append(f"{inst.label()} has other parameter shapes")
            continue
        if differing and not derived:
            notes.append(f"{inst.label()} also differs in {', '.join(differing[:3])}")
            continue
        served.append(k)
    return served, notes


# ---- the second batch size ---------------------------------------------------------------------

# Under the export target the second batch size is checked in eager mode only: an exported
# program is specialised to the input shapes it was exported with (dynamic shapes are out of
# scope), so one for the second size would be a new trace of the Python the eager run just
# ran, at the cost of an export per class.
EXPORT_OTHER_BATCH = "eager parity (not exported again)"


def at_other_batch(module: Any, batch: OtherBatch | None, check: Check, label: str) -> None:
    """``module`` reproduces the original's output at the second batch size (the words of
    ``check``, after the size: "at batch size 3: re-script: ..."); nothing to do when the call
    has no batch axis or the original raises there."""
    if batch is None or batch.skipped:
        return
    reproduces(module, [(label, batch.args, batch.kwargs, batch.expected)],
               replace(check, raised=f"{batch.label}: {check.raised}",
                       differs=f"{batch.label}: {check.differs}"))


def other_batch_note(varied: list[OtherBatch | None], steps: str) -> str:
    """The verified reason's words for the second batch size: which steps held there, or why
    the batch axis was not varied."""
    checked = [b for b in varied if b is not None and not b.skipped]
    skipped = [b for b in varied if b is not None and b.skipped]
    parts = []
    if checked:
        sizes = ", ".join(sorted({str(b.size) for b in checked}))
        parts.append(f"at batch size {sizes} too: {steps} ({len(checked)} of {len(varied)} "
                     "configuration(s))")
    if skipped:
        parts.append(f"batch size not varied for {len(skipped)} configuration(s): "
                     f"{skipped[0].skipped}")
    return "".join(f"; {part}" for part in parts)


def saved_and_loaded(artifact: Any) -> Any:
    """A scripted module after ``torch.jit.save`` and ``load``, or an exported program's module
    after ``torch.export.save`` and ``load``; raises what saving or loading raises."""
    buffer = io.BytesIO()
    if isinstance(artifact, torch.export.ExportedProgram):
        torch.export.save(artifact, buffer)
        buffer.seek(0)
        return torch.export.load(buffer).module()
    torch.jit.save(artifact, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)  # type: ignore[no-untyped-call]


def save_load_step(artifact: Any, python_only: bool, rename: dict[str, str],
                   original: torch.nn.Module | None = None) -> tuple[Any | None, str]:
    """The save/load step for a scripted artifact: the loaded copy (None when saving failed as
    a Python-only artifact's must: an ignored method) and the step's words. A save that fails
    otherwise rejects the rewrite, unless ``original`` (the original instance the artifact was
    made to replace) scripts and cannot be saved and loaded either: then it is not the
    rewrite's failure, and the rewrite is unverified."""
    try:
        loaded = saved_and_loaded(artifact)
    except BaseException as exc:
        if not python_only:
            error = short_error(exc, rename)
            before = None if original is None else save_load_failure(original)
            if before is not None:
                raise unverified(f"save/load fails, and so does the original's: {error} (the "
                                 f"original: {before}); eager parity, re-script and one "
                                 "artifact hold") from exc
            raise rejected(f"save/load: {error}") from exc
        return None, f"save fails as expected ({PYTHON_ONLY_SAVE})"
    # A Python-only rewrite whose ignored method forward never reaches saves: nothing
    # Python-only remains.
    return loaded, ("save/load (no ignored method is called)" if python_only else "save/load")


def save_load_failure(module: torch.nn.Module) -> str | None:
    """Why ``module``, scripted, cannot be saved with ``torch.jit.save`` and loaded again;
    None when it can, and when it does not script (it never reaches save: a rewrite that
    scripts and then fails to save, a Python-only rule the job did not declare, is rejected
    as before)."""
    try:
        artifact = script(module)
    except BaseException:
        return None
    try:
        saved_and_loaded(artifact)
    except BaseException as exc:
        return short_error(exc)
    return None


# ---- ONNX (--target onnx) ----------------------------------------------------------------------

def check_onnx(case: ClassCase, artifacts: list[tuple[Any, dict[str, Any]]]) -> str:
    """The onnx step: export each configuration's artifact, check it, run it in onnxruntime.
    ``artifacts[k]`` is the scripted module for configuration ``k`` and the lifted arguments
    that select its settings (empty when it is its own scripted instance)."""
    from tsfix.codemods.validation import onnx_export as ox

    exports: dict[tuple[Any, ...], tuple[ox.Runtime, int]] = {}
    compared = 0
    for k, inst in enumerate(case.configs):
        module, values = artifacts[k]
        weights = case.originals[k].state_dict()
        for j, (args, kwargs) in enumerate(inst.calls):
            label = inst.label(j)
            try:
                arguments = ox.export_arguments(module, args, {**kwargs, **values})
            except ox.OnnxFailure as exc:
                raise rejected(f"onnx: {exc} for {label}") from exc
            except ox.OnnxUnsupported as exc:
                raise unverified(f"onnx: not checked: {exc} for {label}") from exc
            # One export per module, weights and input signature; the settings are inputs.
            key = (id(module), fingerprint(weights),
                   tuple((name, _signature(value)) for name, value in arguments
                         if name not in values))
            if key not in exports:
                exports[key] = _export_checked(module, weights, arguments, values, label,
                                               case.rename)
            onnxruntime_parity(exports[key][0], arguments, case.expected[k][j],
                               f"{label}{with_settings(values)}",
                               lambda exc: short_error(exc, case.rename))
            compared += 1
    reason = f"onnx: exported ({len(exports)} model(s)), checker"
    if case.lifted:
        if_count = sum(count for _, count in exports.values())
        reason += f", {if_count} If node(s), each lifted input decides a branch"
    return f"{reason}, onnxruntime parity for {compared} configuration(s)"


def onnxruntime_parity(runtime: Any, arguments: list[tuple[str, Any]], expected: Any,
                       where: str, error: Callable[[Exception], str]) -> None:
    """The onnx step's comparison: onnxruntime, fed ``arguments``, gives the eager
    ``expected`` outputs, else rejected (``where`` names the call, ``error`` writes an
    onnxruntime failure)."""
    from tsfix.codemods.validation import onnx_export as ox

    torch.manual_seed(SEED)
    try:
        want, got = ox.matched_outputs(expected, runtime.run(arguments))
    except ox.OnnxFailure as exc:
        raise rejected(f"onnx: {error(exc)} for {where}") from exc
    found = difference(want, got, "onnxruntime output")
    if found:
        raise rejected(f"onnx: {found} for {where}")


def _export_checked(module: Any, weights: dict[str, Any], arguments: list[tuple[str, Any]],
                    values: dict[str, Any], label: str, rename: dict[str, str]
                    ) -> tuple[Any, int]:
    """Export a copy of ``module`` with ``weights``, check it, and when lifted settings are
    inputs, that each one decides a branch: its onnxruntime session and its ``If`` nodes. The
    copy keeps the exporter's freezing away from the artifact the other steps use."""
    from tsfix.codemods.validation import onnx_export as ox

    copy = saved_and_loaded(module)
    copy.load_state_dict(weights)
    copy.eval()
    try:
        model = ox.check(ox.export(copy, arguments))
    except ox.OnnxFailure as exc:
        raise rejected(f"onnx: {short_error(exc, rename)} for {label}"
                       f"{with_settings(values)}") from exc
    undecided = ox.undecided_inputs(model, list(values))
    if undecided:
        raise rejected(f"onnx: no If node decides on the lifted {', '.join(undecided)} in the "
                       f"exported graph (the export keeps one path only) for {label}")
    return ox.Runtime(model.SerializeToString()), ox.count_nodes(model.graph, "If")


def fingerprint(weights: dict[str, Any]) -> str:
    """A digest of a state dict's names and values (equal weights, equal digest)."""
    digest = hashlib.sha256()
    for name, tensor in weights.items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), str(value.dtype))
    return value


