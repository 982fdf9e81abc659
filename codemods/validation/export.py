"""The steps of ``--target export``: the torch.export path instead of TorchScript's.

Imported by the validation worker only, for jobs whose target is ``export``. The verifier
(:mod:`tsfix.codemods.validation.verifier`, which lists every target's steps) has already run
``build``, ``eager parity`` and ``one artifact (eager)``, with lifted settings given as 0-d
tensors (:func:`~tsfix.codemods.validation.case.setting_value`) and every ``torch.cond`` call
of the rewritten file recorded (:class:`CondRecorder`). Then :func:`check_export` runs, in
order:

1. ``export`` (:func:`export_served`, :func:`export_alone`): the instance built from the first
   configuration is exported ONCE (``torch.export.export``, non strict), with the first call's
   arguments and the lifted settings as tensor keyword arguments. ``ep.module()``, given each
   served configuration's weights (``load_state_dict``) and settings, must reproduce every
   call's eager output. An exported program only takes inputs of the shapes it was exported
   with (torch 2.13: ``AssertionError: Guard failed: x.size()[0] == 2``), and dynamic shapes
   are out of scope: a call with other input shapes (or other non-tensor arguments) is checked
   on a program exported again for it ("exported per input shape", :class:`Programs`). A
   configuration the one program cannot serve (other parameter shapes or other settings) is
   exported on its own. When the rewrite does not export, the original is exported too: when
   it exports, the rewrite is ``rejected``; when it does not either, the rewrite is no
   regression and ``unverified`` (whichever error comes first). Whether the original exports
   is said in the reason (with lifted settings, it then exports the first configuration's
   path only);
2. ``save/load`` (:func:`program_saved`): ``torch.export.save`` / ``load`` keeps the outputs;
3. ``onnx`` (:func:`check_onnx`), with onnx, onnxruntime and onnxscript installed:
   ``torch.onnx.export(..., dynamo=True)`` holds at least one ``If`` per ``torch.cond`` site
   the exported call reaches, each lifted setting decides an ``If``, and onnxruntime
   reproduces every served call (settings fed as inputs). Without them the reason says the
   ONNX check was not made;
4. ``torch.cond`` sides (:func:`cond_sides`, after the steps that can reject): every
   ``torch.cond`` call site of the rewritten file must have taken both sides in the eager runs,
   else ``unverified`` naming the line (the examples prove only one side).

A class a configured model reaches runs the same steps on the model's instances
(:func:`check_reached`); the configured model itself is exported per configuration
(:func:`check_model`).

Non-strict export (``strict=False``, torch 2.13's default) is used: it runs the model's Python
as written, so a failure's traceback holds the model's real frames (the first user frame names
the construct), it is what ``torch.onnx.export(dynamo=True)`` tries first, and it exports
``torch.cond`` with nested branch functions closing over ``self`` (measured: strict exports them
too, with the same outputs; strict reports frames only inside its message text).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import io
import logging
import re
import sys
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree
from tsfix.codemods.validation.case import ClassCase, Pair, ReachedCase
from tsfix.codemods.validation.verifier import (
    Check,
    fingerprint,
    onnxruntime_parity,
    reproduces,
    saved_and_loaded,
    verified_summary,
)
from tsfix.codemods.validation.worker import (
    _INSTALLATION,
    _SITE,
    Verdict,
    comparable_text,
    fresh,
    rejected,
    unverified,
)

ONNX_NOT_CHECKED = "onnx: not checked (pip install 'tsfix[onnx]')"
_TSFIX_FILES = str(Path(__file__).resolve().parent.parent) + "/"


# ---- lifted settings ---------------------------------------------------------------------------

def string_codes(source: str, class_name: str) -> dict[str, dict[str, int]]:
    """attribute -> {string: code} for every str setting lift-branch turned into an int code
    in ``class_name`` (the ``{"a": 0, ...}.get(self.x, -1)`` it writes)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found: dict[str, dict[str, int]] = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef) or cls.name != class_name:
            continue
        for node in ast.walk(cls):
            if not isinstance(node, ast.Call):
                continue
            if not (isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and isinstance(node.func.value, ast.Dict) and len(node.args) == 2
                    and isinstance(node.args[0], ast.Attribute)):
                continue
            try:
                table = ast.literal_eval(node.func.value)
            except ValueError:
                continue
            if isinstance(table, dict) and all(isinstance(k, str) and isinstance(v, int)
                                               for k, v in table.items()):
                found[node.args[0].attr] = table
    return found


# ---- torch.cond sides --------------------------------------------------------------------------

class CondRecorder:
    """The predicate values each ``torch.cond`` call site of the rewritten file took, recorded
    while :meth:`recording` (eager runs only: during export tracing the predicate has no
    value). ``config`` is the configuration running now; ``sites_by_config`` tells which sites
    each one reached."""

    def __init__(self, rewritten: types.ModuleType) -> None:
        file = vars(rewritten).get("__file__")
        self.file = str(Path(file).resolve()) if isinstance(file, str) else ""
        self.sides: dict[int, set[bool]] = {}
        self.config = 0
        self.sites_by_config: dict[int, set[int]] = {}

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        real = torch.cond

        def recorded_cond(pred: Any, *rest: Any, **options: Any) -> Any:
            # A cond inside a branch runs while the outer one is being compiled: calling
            # through keeps it traceable, and it is not recorded.
            if torch.compiler.is_compiling():
                return real(pred, *rest, **options)
            caller = sys._getframe(1)
            if str(Path(caller.f_code.co_filename).resolve()) == self.file:
                where = f"line {caller.f_lineno}"
                with contextlib.suppress(Exception):
                    self.sides.setdefault(caller.f_lineno, set()).add(bool(pred))
                    self.sites_by_config.setdefault(self.config, set()).add(caller.f_lineno)
            else:
                where = f"{Path(caller.f_code.co_filename).name} line {caller.f_lineno}"
            try:
                return real(pred, *rest, **options)
            except Exception as exc:
                failing = failing_side(real, pred, rest, options, where)
                if failing is None:
                    raise
                raise failing from exc

        torch.cond = recorded_cond
        try:
            yield
        finally:
            torch.cond = real

    def one_sided(self) -> list[str]:
        return [f"torch.cond at line {line} only took the {'true' if True in seen else 'false'}"
                " side on the examples" for line, seen in sorted(self.sides.items())
                if len(seen) < 2]


class CondSideError(RuntimeError):
    """A side of a ``torch.cond`` call that raises when traced: torch.cond traces both sides
    before it runs one, also in eager mode with a concrete predicate (measured, torch 2.13),
    so a side the configuration does not take (``x + x1`` of two shapes under
    ``do_res=False``) fails a model the original ran."""


def failing_side(real: Callable[..., Any], pred: Any, rest: tuple[Any, ...],
                 options: dict[str, Any], where: str) -> CondSideError | None:
    """After a ``torch.cond`` call at ``where`` raised: the side that raises traced on its own
    (a cond with that side on both sides), named; None when neither does alone."""
    if len(rest) < 3:
        return None
    true_fn, false_fn, operands = rest[:3]
    try:
        taken: bool | None = bool(pred)
    except Exception:
        taken = None
    for side, function in (("true", true_fn), ("false", false_fn)):
        try:
            with quiet():
                real(pred, function, function, operands, *rest[3:], **options)
        except Exception as exc:
            which = ("" if taken is None else
                     " (the side this call takes)" if taken == (side == "true") else
                     " (a side this call does not take: torch.cond traces both, also in "
                     "eager mode)")
            return CondSideError(f"torch.cond at {where}: its {side} side raises when "
                                 f"traced{which}: {traced_error(exc)}")
    return None


def traced_error(exc: BaseException) -> str:
    """The error a traced operation raised, read out of dynamo's "RuntimeError when making
    fake tensor call" (its explanation holds ``got RuntimeError('...')``), else the
    headline."""
    found = re.search(r"got (\w+)\((['\"])(.*?)\2\)", str(exc), re.DOTALL)
    if found:
        return f"{found.group(1)}: {' '.join(found.group(3).split())}"[:300]
    return headline(exc)[:300]


# ---- export ------------------------------------------------------------------------------------

@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """torch.export and the ONNX exporter print graphs on stdout when tracing fails, log
    warnings (data-dependent symbols, "torchvision is not installed") and raise Python
    warnings: none of that is a verdict, so it is kept out of the worker's output."""
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def export(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    with quiet():
        args, kwargs = fresh((args, kwargs))
        return torch.export.export(module, args, kwargs, strict=False)


def signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """What one exported program is specialised on: the input structure, each tensor's shape
    and dtype, every other value."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    parts = [f"{tuple(v.shape)}:{v.dtype}" if isinstance(v, torch.Tensor) else repr(v)
             for v in leaves]
    return f"{spec}|{'|'.join(parts)}"


def _is_user_file(file: str) -> bool:
    if file.startswith("<"):
        return False
    try:
        resolved = str(Path(file).resolve())
    except (OSError, RuntimeError, ValueError):
        return False
    return not resolved.startswith(_INSTALLATION) and not resolved.startswith(_TSFIX_FILES)


def user_site(exc: BaseException, keep: Callable[[str], bool] | None = None
              ) -> tuple[str, int] | None:
    """The innermost frame of the model's own code an export error points at: from the
    message (strict mode and torch.cond branches are traced by Dynamo, which lists "user code"
    frames there), else from the traceback (non-strict export runs the model's frames)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    # The exception's own sites first: one raised while handling another (the original's
    # export after the rewrite's) has the other as its context.
    for error in chain:
        in_message = [(m.group(1), int(m.group(2))) for m in _SITE.finditer(str(error))]
        in_traceback = [(frame.filename, frame.lineno or 0)
                        for frame in traceback.extract_tb(error.__traceback__)]
        for sites in (in_message, in_traceback):
            user = [site for site in sites
                    if _is_user_file(site[0]) and (keep is None or keep(site[0]))]
            if user:
                return user[-1]
    return None


def headline(exc: BaseException, *modules: types.ModuleType) -> str:
    """An export error's type and first line (with the line after it when it ends in a
    colon: "This higher order operator doesn't work unless ...:" says nothing yet), with
    module names, files and addresses made alike across the original and the rewrite."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[1]}"
    text = comparable_text(text, *modules)
    # "Could not guard on data-dependent expression Eq(u0, 1) (unhinted: ...)": the rest is
    # torch's debugging detail.
    text = re.sub(r"\s*\(unhinted: .*$", "", text)
    return f"{type(exc).__name__}: {text}"


def describe(exc: BaseException, rename: dict[str, str]) -> str:
    """One line for a reason: the headline and the model's line it points at."""
    text = headline(exc)[:300]
    site = user_site(exc)
    if site is not None:
        file = rename.get(site[0], Path(site[0]).name)
        text += f" (at {file} line {site[1]})"
    return text


# ---- the steps ---------------------------------------------------------------------------------

def reloaded_program(program: Any, rename: dict[str, str]) -> Any:
    """The module of ``program`` after ``torch.export.save`` and ``load``; rejected when either
    fails."""
    try:
        with quiet():
            return saved_and_loaded(program)
    except Exception as exc:
        raise rejected(f"save/load: {describe(exc, rename)}") from exc


class Programs:
    """The programs exported for one case: one per exported module and input signature
    (lifted settings included). An exported program only takes inputs of the shapes it was
    exported with and dynamic shapes are out of scope, so a call with another signature is
    served by a program exported again for it."""

    def __init__(self) -> None:
        self.found: dict[tuple[int, str], tuple[Any, Any]] = {}

    def get(self, source: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
            failed: Callable[[Exception], Verdict]) -> tuple[Any, Any]:
        """The program of ``source`` for this call and its module; ``failed`` gives the
        verdict when it does not export."""
        key = (id(source), signature(args, kwargs))
        if key not in self.found:
            try:
                program = export(source, args, kwargs)
            except Exception as exc:
                raise failed(exc) from exc
            self.found[key] = program, program.module()
        return self.found[key]

    def count(self, source: Any) -> int:
        return sum(key[0] == id(source) for key in self.found)


def check_export(case: ClassCase) -> str:
    """The export target's steps after the eager ones, in order (the module docstring says
    what each proves); the verified reason, or raises :class:`~tsfix.codemods.validation.
    worker.Verdict`."""
    programs = Programs()
    program, served_calls = export_served(case, programs)
    per_shape = programs.count(case.first)
    separately = export_alone(case, programs)
    original_note = original_exports(case)
    saved_calls = program_saved(case, program)
    onnx_note = (check_onnx(case, program, first_signature(case)) if onnx_available()
                 else ONNX_NOT_CHECKED)
    cond_sides(case, onnx_note)
    programs_note = (f" (exported per input shape: {per_shape} programs)" if per_shape > 1
                     else "")
    conds = (f"both sides of {len(case.conds.sides)} cond(s)" if case.conds.sides
             else "no torch.cond")
    steps = (f"eager parity, one exported program served {served_calls} of {case.n_calls}"
             f"{programs_note}, {conds}, save/load ({saved_calls} call(s)); {original_note}; "
             f"{onnx_note}")
    if separately:
        steps += f"; exported on their own: {', '.join(separately)}"
    return verified_summary(case.configs, steps, case.notes)


def first_signature(case: ClassCase) -> str:
    """What the first program is specialised on: the first call with init[0]'s settings."""
    args, kwargs = case.configs[0].calls[0]
    return signature(args, {**kwargs, **case.values(0)})


def export_served(case: ClassCase, programs: Programs) -> tuple[Any, int]:
    """Step ``export``: the instance built from the first configuration, exported (one program
    per input shape), serves every served configuration given its weights and settings. The
    first program, and how many calls were served."""
    def program_for(k: int, j: int) -> tuple[Any, Any]:
        args, kwargs = case.configs[k].calls[j]
        return programs.get(case.first, args, {**kwargs, **case.values(k)},
                            lambda exc: failed_export(case, exc, k, j))

    program, _ = program_for(0, 0)
    served_calls = 0
    for k in case.served:
        for j in range(len(case.configs[k].calls)):
            check_call(case, program_for(k, j)[1], k, j, "export")
            served_calls += 1
    return program, served_calls


def export_alone(case: ClassCase, programs: Programs) -> list[str]:
    """Step ``export`` for the configurations the one program cannot serve: each exported on
    its own (one program per input shape); their labels."""
    separately = []
    for k, inst in enumerate(case.configs):
        if k in case.served:
            continue
        for j, (args, kwargs) in enumerate(inst.calls):
            def failed(exc: Exception, k: int = k, j: int = j) -> Verdict:
                return failed_export(case, exc, k, j, own=True)

            _, module = programs.get(case.rewrites[k], args, kwargs, failed)
            check_call(case, module, k, j, "export", settings=False)
        separately.append(inst.label())
    return separately


def program_saved(case: ClassCase, program: Any) -> int:
    """Step ``save/load``: the first program after ``torch.export.save``/``load`` reproduces
    every served call of its signature; how many."""
    loaded = reloaded_program(program, case.rename)
    first_key = first_signature(case)
    saved_calls = 0
    for k in case.served:
        for j, (args, kwargs) in enumerate(case.configs[k].calls):
            if signature(args, {**kwargs, **case.values(k)}) == first_key:
                check_call(case, loaded, k, j, "save/load")
                saved_calls += 1
    return saved_calls


def cond_sides(case: ClassCase, onnx_note: str) -> None:
    """Step ``torch.cond sides`` (after the steps that can reject): every torch.cond call site
    of the rewritten file took both sides in the eager runs, else unverified naming it."""
    one_sided = case.conds.one_sided()
    if one_sided:
        raise unverified(f"{'; '.join(one_sided)} (add an input or configuration taking the "
                         f"other side); eager parity, export, save/load hold; {onnx_note}")


def check_call(case: ClassCase, module: Any, k: int, j: int, step: str,
               settings: bool = True) -> None:
    """``module`` with configuration ``k``'s weights (and settings) reproduces call ``j``."""
    module.load_state_dict(case.originals[k].state_dict())
    check = Check(f"{step}: the exported program raised for {{label}}{{with_values}}: "
                  "{error}", f"{step}: {{found}} for {{label}}{{with_values}}", case.rename,
                  describe, quiet)
    reproduces(module, [case.calls(k)[j]], check, case.values(k) if settings else {})


def failed_export(case: ClassCase, exc: BaseException, k: int, j: int, own: bool = False
                  ) -> Verdict:
    """The verdict for a rewrite that does not export: the original is exported with the same
    call (without the lifted settings it does not take)."""
    error = describe(exc, case.rename)
    args, kwargs = case.configs[k].calls[j]
    label = case.configs[k].label(j)
    try:
        export(case.originals[k], args, kwargs)
    except Exception as original_exc:
        # The original did not export either: no regression, whichever error comes first
        # (verifier.not_scripting decides alike for TorchScript).
        before = describe(original_exc, {})
        return unverified(f"does not export either: the rewrite fails with: {error} for "
                          f"{label} (the original fails with: {before}); {case.eager_served}")
    what = "its own instance" if own else "the first configuration's instance"
    return rejected(f"export: the rewritten class does not export ({what}, {label}) while "
                    f"the original does: {error}")


def original_exports(case: ClassCase) -> str:
    """Whether the original exports with the first call: with lifted settings, its program
    then keeps the first configuration's path only (what lift-branch fixes)."""
    args, kwargs = case.configs[0].calls[0]
    try:
        export(case.originals[0], args, kwargs)
    except Exception as exc:
        return f"the original does not export: {describe(exc, {})}"
    if case.lifted:
        return "the original exports with init[0]'s path only"
    return "the original exports too"


# ---- ONNX (dynamo exporter) --------------------------------------------------------------------

def onnx_available() -> bool:
    return all(importlib.util.find_spec(name) is not None
               for name in ("onnx", "onnxruntime", "onnxscript"))


def onnx_model(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    args, kwargs = fresh((args, kwargs))
    with quiet():
        exported = torch.onnx.export(model, args, kwargs=kwargs, dynamo=True,
                                     verbose=False)
    assert exported is not None
    return exported.model_proto


def check_onnx(case: ClassCase, program: Any, first_key: str) -> str:
    """Step 6 for the calls the first program serves: one ONNX model per distinct weights
    (the exporter bakes them in), its ``If`` nodes and onnxruntime outputs."""
    from tsfix.codemods.validation import onnx_export as ox

    first_weights = fingerprint(case.originals[0].state_dict())
    runtimes: dict[str, Any] = {}
    parameters = inspect.signature(case.first.forward)
    compared = 0
    if_count = 0
    for k in case.served:
        weights = fingerprint(case.originals[k].state_dict())
        settings = case.values(k)
        for j, (args, kwargs) in enumerate(case.configs[k].calls):
            if signature(args, {**kwargs, **settings}) != first_key:
                continue
            label = case.configs[k].label(j)
            if weights not in runtimes:
                # The program's weights are the instance's tensors, which the checks before
                # loaded other configurations' weights into.
                case.first.load_state_dict(case.originals[k].state_dict())
                source: Any = program if weights == first_weights else case.first
                try:
                    model = onnx_model(source, args, {**kwargs, **settings})
                except Exception as exc:
                    raise onnx_failure(case, exc) from exc
                if not runtimes:
                    if_count = ox.count_nodes(model.graph, "If")
                    check_branches(case, model, if_count)
                runtimes[weights] = ox.Runtime(model.SerializeToString())
            runtime = runtimes[weights]
            try:
                bound = parameters.bind(*args, **kwargs, **settings).arguments
            except TypeError as exc:
                return f"onnx: exported, {if_count} If node(s); onnxruntime not run: {exc}"
            missing = [name for name in runtime.input_names if name not in bound]
            if missing:
                return (f"onnx: exported, {if_count} If node(s); onnxruntime not run: inputs "
                        f"{', '.join(missing)} are not forward parameters")
            onnxruntime_parity(runtime, [(n, bound[n]) for n in runtime.input_names],
                               case.expected[k][j], label, str)
            compared += 1
    reason = f"onnx: {if_count} If node(s)"
    if case.lifted:
        reason += ", each lifted setting decides one"
    return f"{reason}, onnxruntime parity for {compared} call(s)"


def check_branches(case: ClassCase, model: Any, if_count: int) -> None:
    """At least one ``If`` per torch.cond site the first configuration reached, and an ``If``
    deciding on each lifted setting: else the ONNX file keeps one path only."""
    from tsfix.codemods.validation import onnx_export as ox

    sites = sorted(case.conds.sites_by_config.get(0, set()))
    if if_count < len(sites):
        raise rejected(f"onnx: {if_count} If node(s) for {len(sites)} torch.cond site(s) "
                       f"(lines {', '.join(map(str, sites))}): the export keeps one path only")
    undecided = ox.undecided_inputs(model, list(case.lifted))
    if undecided:
        raise rejected(f"onnx: no If node decides on the lifted {', '.join(undecided)} in the "
                       "exported graph (the export keeps one path only)")


def onnx_failure(case: ClassCase, exc: BaseException) -> Verdict:
    """The ONNX exporter fails on a program torch.export made: the rewrite's fault only when
    the original converts."""
    error = describe(exc, case.rename)
    args, kwargs = case.configs[0].calls[0]
    try:
        onnx_model(case.originals[0], args, kwargs)
    except Exception as original_exc:
        return unverified(f"onnx: the exporter fails on the rewrite ({error}) and on the "
                          f"original ({describe(original_exc, {})}); torch.export holds")
    return rejected(f"onnx: the exporter fails on the rewrite while the original converts: "
                    f"{error}")


# ---- configured models (model jobs) ------------------------------------------------------------

@dataclass
class ModelCheck:
    """The outcome of exporting a configured model: ``failure`` is None when every
    configuration exported and reproduced the original's eager outputs (``reason`` says what
    held); else the reason, with the export error when there is one."""

    reason: str
    failure: BaseException | None = None
    ok: bool = True


def check_model(configs: list[Any], models: list[Any], outputs: list[list[Any]],
                rename: dict[str, str]) -> ModelCheck:
    """Each configuration of the rewritten model exported (one program per input shape),
    its outputs against the ORIGINAL's eager outputs, and a save/load of each program."""
    parity = Check("export: the exported program raised for {label}: {error}",
                   "export: {found} for {label} (against the original's eager output)", rename,
                   describe, quiet)
    programs = 0
    for k, (inst, model) in enumerate(zip(configs, models, strict=True)):
        own: dict[str, Any] = {}
        for j, (args, kwargs) in enumerate(inst.calls):
            key = signature(args, kwargs)
            if key not in own:
                try:
                    program = export(model, args, kwargs)
                except Exception as exc:
                    return ModelCheck(f"export: {describe(exc, rename)} for {inst.label(j)}",
                                      exc, False)
                try:
                    with quiet():
                        own[key] = saved_and_loaded(program)
                except Exception as exc:
                    return ModelCheck(f"save/load: {describe(exc, rename)} for "
                                      f"{inst.label(j)}", None, False)
                programs += 1
            try:
                reproduces(own[key], [(inst.label(j), args, kwargs, outputs[k][j])], parity)
            except Verdict as outcome:
                return ModelCheck(outcome.reason, None, False)
    return ModelCheck(f"{len(configs)} configuration(s): eager parity, exported "
                      f"({programs} program(s), one per configuration and input shape), "
                      "parity with the original, save/load")


class ReachedPrograms:
    """The programs exported for a reached class's instances (:class:`Programs`), and the
    step that checks one."""

    def __init__(self, case: ReachedCase) -> None:
        self.case = case
        self.programs = Programs()

    def program_for(self, pair: Pair, source: Any, settings: dict[str, Any], j: int
                    ) -> tuple[Any, Any]:
        """``source`` exported with call ``j`` of ``pair`` (and ``settings``): the program
        and its module. One that does not export is rejected when the original instance
        exports, else unverified (no regression, whichever error comes first)."""
        recorded = pair.seen.calls[j]

        def failed(exc: Exception) -> Verdict:
            error = describe(exc, self.case.rename)
            try:
                export(pair.seen.module, recorded.args, recorded.kwargs)
            except Exception as original_exc:
                return unverified(f"does not export either: the rewrite fails with: {error} "
                                  f"(the original fails with: {describe(original_exc, {})})")
            return rejected(f"export: the rewritten instance does not export while the "
                            f"original does: {error}")

        return self.programs.get(source, recorded.args, {**recorded.kwargs, **settings},
                                 failed)

    def check(self, module: Any, pair: Pair, j: int, settings: dict[str, Any], step: str
              ) -> None:
        """``module`` with ``pair``'s weights (and ``settings``) reproduces its call ``j``."""
        module.load_state_dict(pair.seen.module.state_dict())
        check = Check(f"{step}: the exported program raised for {{label}}: {{error}}",
                      f"{step}: {{found}} for {{label}}", self.case.rename, describe, quiet)
        reproduces(module, [self.case.calls(pair)[j]], check, settings)


def check_reached(case: ReachedCase, served: list[Pair]) -> str:
    """A class a configured model reaches, under the export target: the first instance
    exported (lifted settings as tensor arguments) serves every ``served`` instance's recorded
    calls given its weights and settings; every other called instance is exported on its own
    (one program per input shape)."""
    first = case.first
    assert first is not None
    serving = [first, *(p for p in served if p is not first)]
    alone = [p for p in case.called if p not in serving]
    # An exported program's parameters are the exported module's own tensors, and
    # load_state_dict copies into them: the rewritten model (which the model verdict runs
    # next) gets its weights back afterwards.
    exported_from = [first.new, *(p.new for p in alone)]
    kept = [(module, {key: value.detach().clone() for key, value in module.state_dict().items()})
            for module in exported_from]
    try:
        return _serve_reached(case, serving, alone)
    finally:
        for module, state in kept:
            module.load_state_dict(state)


def _example_calls(pair: Pair) -> list[int]:
    """Indexes of the recorded calls of ``pair`` made by the model's example calls: those of
    its run at the second batch size are checked in eager mode only (verifier.EXPORT_OTHER_BATCH
    says why)."""
    return [j for j, recorded in enumerate(pair.seen.calls) if recorded.batch is None]


def _serve_reached(case: ReachedCase, serving: list[Pair], alone: list[Pair]) -> str:
    first = case.first
    assert first is not None
    exported = ReachedPrograms(case)
    programs = set()
    for pair in serving:
        settings = case.values(pair)
        for j in _example_calls(pair):
            program, module = exported.program_for(pair, first.new, settings, j)
            programs.add(id(program))
            exported.check(module, pair, j, settings, "export")
    for pair in alone:
        for j in _example_calls(pair):
            program, module = exported.program_for(pair, pair.new, {}, j)
            programs.add(id(program))
            exported.check(module, pair, j, {}, "export")

    program = exported.program_for(first, first.new, case.values(first), 0)[0]
    loaded = reloaded_program(program, case.rename)
    exported.check(loaded, first, 0, case.values(first), "save/load")
    return (f"one exported program served {len(serving)} of {len(case.called)} instance(s) "
            f"({len(programs)} program(s), one per input shape), save/load"
            + (f", {len(alone)} exported on their own" if alone else ""))
