"""Model jobs (:class:`~tsfix.codemods.validation.protocol.ModelJob`), run in the validation
worker: a configured model built from the original tree and, in ``validate`` mode, from the
tree as tsfix would leave it.

The original run. The model's file is imported as its package module (its real name), every
``init`` of the example is built (seeded, eval mode) and called with every call. Forward
pre-hooks and hooks on every submodule instance whose class is defined in the tree record, per
module path, the first :data:`RECORDED_CALLS` calls: cloned arguments before the call and the
cloned output after it. A call whose tensors exceed :data:`MAX_CALL_BYTES`, or that would take
the recordings past :data:`MAX_TOTAL_BYTES`, is not recorded (the instance then says why it has
no inputs). Each configuration's first call then runs once more at a second batch size
(:class:`~tsfix.codemods.validation.worker.OtherBatch`), recording each tree instance's first
call of that run (past the cap, marked with the size): the classes the model reaches are
checked at that size from this one extra model run, and the model verdict compares the
rewritten model's (and its scripted module's) output there too. When the original raises at
that size, its batch axis is not free and nothing of that run is kept. The hooks are removed
before anything is scripted (TorchScript would compile them).

``observe`` mode also records, with :class:`~tsfix.codemods.validation.worker.TypeRecorder`,
the types of every method of every class of the tree the model holds an instance of, and of its
bases defined in tree files (each under the class that defines it), keyed by file, in the
example calls and at the second batch size (a tuple whose length follows the batch is then
typed ``List[T]``).

``validate`` mode then forgets the tree's modules, serves each file of ``overlay`` from a
temporary copy of its new text (a meta-path finder: TorchScript reads the source of what it
compiles, so the text must be a real file), imports the model's module again under its real name
and builds the rewritten model per configuration with the same seed and the original's weights.
Each listed class the model holds instances of gets a verdict from those instances
(:func:`~tsfix.codemods.validation.reached.check_reached_class`), and the model one
:class:`ModelVerdict` (:func:`model_verdict`). The original built and ran with the same table,
so when the rewritten model does not build or its own run raises, the error is new
(:class:`NewFailure`):
the listed classes whose code the traceback runs are rejected, the others reached are
``not checked`` (:data:`~tsfix.codemods.validation.protocol.NOT_CHECKED`; the engine checks
them again once the rejected ones are left out).

"The tree": files under ``job.root`` (resolved) that are not in the Python installation; with no
root, the top package folder of the model's file.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tsfix.codemods.validation.case import Expected, Pair, ReachedCase, RecordedCall, Seen
from tsfix.codemods.validation.protocol import (
    NOT_CHECKED,
    OBSERVED_FUNCTIONS,
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    Blocker,
    ClassVerdict,
    ModelClass,
    ModelClassVerdict,
    ModelJob,
    ModelResult,
    ModelVerdict,
    TypeTable,
    VerdictName,
)
from tsfix.codemods.validation.verifier import (
    EXPORT_OTHER_BATCH,
    Check,
    at_other_batch,
    other_batch_note,
    reproduces,
    saved_and_loaded,
)
from tsfix.codemods.validation.worker import (
    _INSTALLATION,
    _SITE,
    PYTHON_ONLY_SAVE,
    Imports,
    Instance,
    Methods,
    OtherBatch,
    TypeRecorder,
    Verdict,
    build,
    call,
    changed_at,
    class_methods,
    clone,
    difference,
    import_context,
    instances,
    load_module,
    module_functions,
    observe_other_batch,
    other_batch,
    overloads_apart,
    rejected,
    script,
    short_error,
    unverified,
)

__all__ = ["MAX_CALL_BYTES", "MAX_TOTAL_BYTES", "RECORDED_CALLS", "NewFailure", "OverlayFinder",
           "Tree", "blocker_of", "eager_run", "model_verdict",
           "run_model_job", "scope_at", "script_message"]

RECORDED_CALLS = 2                  # calls recorded per submodule instance
MAX_CALL_BYTES = 64 * 2**20         # one call's tensors (inputs or output) recorded at most
MAX_TOTAL_BYTES = 2**30             # all recordings of one job together
# torch.jit.save of a module that calls a @torch.jit.ignore function (measured, torch 2.13).
_PYTHON_CALL_SAVE = "Could not export Python function call"
# Separates a file and a class in TypeRecorder's class key (no path holds a NUL).
_KEY_SEPARATOR = "\0"


# ---- the tree ----------------------------------------------------------------------------------

class Tree:
    """Which files are the model's own: under ``root``, outside the Python installation."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._prefix = str(root) + os.sep

    def holds(self, file: str | None) -> bool:
        if not file or file.startswith("<"):
            return False
        resolved = _resolved(file)
        return resolved.startswith(self._prefix) and not resolved.startswith(_INSTALLATION)


@functools.cache
def _resolved(file: str) -> str:
    """A module file's resolved path ("" when it cannot be resolved). Kept for the worker's
    life: a job asks about every imported module's file (about a thousand with torch), and
    resolving them was a third of a small model job."""
    try:
        return str(Path(file).resolve())
    except (OSError, RuntimeError, ValueError):
        return ""


def tree_of(job: ModelJob, path: Path, package: str, package_root: Path) -> Tree:
    if job.root:
        return Tree(Path(job.root).resolve())
    if package:
        return Tree((package_root / package.split(".")[0]).resolve())
    return Tree(path.parent)


def module_file(module: object) -> str | None:
    """A module's ``__file__`` read from its ``__dict__`` (a lazy module raises on attribute
    access; see worker._installed)."""
    try:
        file = vars(module).get("__file__")
    except TypeError:
        return None
    return file if isinstance(file, str) else None


def tree_modules(tree: Tree, rename: Mapping[str, str] | None = None
                 ) -> dict[str, types.ModuleType]:
    """Imported modules of the tree by name, with a file of the tree (a lazy module without a
    file belongs where its top package does). ``rename``: overlay copies (temporary file ->
    the tree file they stand for) count as their tree file."""
    rename = rename or {}
    found = {}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or name.startswith("tsfix."):
            continue
        file = module_file(module)
        if file is None:
            file = module_file(sys.modules.get(name.partition(".")[0]))
            if file is None:
                continue
        if tree.holds(rename.get(file, file)):
            found[name] = module
    return found


def class_origin(cls: type, rename: Mapping[str, str]) -> tuple[str, str] | None:
    """(resolved original file, qualified name) of a class defined in a file; temporary
    overlay files count as the original file they stand for."""
    file = module_file(sys.modules.get(cls.__module__))
    if file is None:
        return None
    file = rename.get(file, file)
    try:
        return str(Path(file).resolve()), cls.__qualname__
    except (OSError, RuntimeError, ValueError):
        return None


# ---- recording submodule calls ---------------------------------------------------------------

def tensor_bytes(value: Any, depth: int = 0) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    if depth > 20:
        return 0
    if isinstance(value, list | tuple):
        return sum(tensor_bytes(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(v, depth + 1) for v in value.values())
    return 0


class Recorder:
    """Forward pre-hooks and hooks that record the first calls of tree instances."""

    def __init__(self) -> None:
        self.total = 0
        self._pending: dict[int, list[tuple[tuple[Any, ...], dict[str, Any]] | None]] = {}
        # While the model runs at its second batch size: that size, and the instances whose
        # first call of that run is recorded already (one each, past RECORDED_CALLS).
        self.batch: int | None = None
        self._batch_recorded: set[int] = set()

    def _fits(self, size: int, seen: Seen) -> bool:
        if size > MAX_CALL_BYTES:
            seen.not_recorded = (f"a call's tensors ({size / 2**20:.0f} MB) exceed the "
                                 f"{MAX_CALL_BYTES // 2**20} MB recorded per call")
            return False
        if self.total + size > MAX_TOTAL_BYTES:
            seen.not_recorded = (f"the model's recordings reached {MAX_TOTAL_BYTES // 2**20} MB "
                                 "before this instance was called")
            return False
        return True

    @contextlib.contextmanager
    def attached(self, seen: Sequence[Seen]) -> Iterator[None]:
        handles = []
        try:
            for item in seen:
                handles.append(item.module.register_forward_pre_hook(
                    self._before(item), with_kwargs=True))
                handles.append(item.module.register_forward_hook(
                    self._after(item), with_kwargs=True))
            yield
        finally:
            for handle in handles:
                handle.remove()
            self._pending.clear()

    def _before(self, seen: Seen) -> Callable[..., None]:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            stack = self._pending.setdefault(id(seen), [])
            if self.batch is not None:
                first = id(seen) not in self._batch_recorded
                self._batch_recorded.add(id(seen))
                if not first:
                    stack.append(None)
                    return
            else:
                seen.called += 1
                if seen.called > RECORDED_CALLS:
                    stack.append(None)
                    return
            size = tensor_bytes(args) + tensor_bytes(kwargs)
            if not self._fits(size, seen):
                stack.append(None)
                return
            self.total += size
            stack.append((clone(args), clone(kwargs)))
        return hook

    def _after(self, seen: Seen) -> Callable[..., None]:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 output: Any) -> None:
            stack = self._pending.get(id(seen))
            inputs = stack.pop() if stack else None
            if inputs is None:
                return
            size = tensor_bytes(output)
            if not self._fits(size, seen):
                return
            self.total += size
            seen.calls.append(RecordedCall(inputs[0], inputs[1], clone(output), self.batch))
        return hook

    @contextlib.contextmanager
    def at_batch(self, size: int) -> Iterator[None]:
        """Record each instance's first call of a run at the second batch size."""
        self.batch = size
        self._batch_recorded.clear()
        try:
            yield
        finally:
            self.batch = None


def record_other_batch(model: torch.nn.Module, inst: Instance, mine: Sequence[Seen],
                       calls: Recorder) -> OtherBatch | None:
    """The original model's first call of configuration ``inst`` at the second batch size
    (:class:`~tsfix.codemods.validation.worker.OtherBatch`): its output, and each tree
    instance's first call in that run recorded (marked with the size), so the classes the
    model reaches are checked at that size too, from the one extra model run. When the
    original raises there, nothing of the run is kept and ``skipped`` says why."""
    batch = other_batch(*inst.calls[0]) if inst.calls else None
    if batch is None:
        return None
    with calls.attached(mine), calls.at_batch(batch.size):
        ran = batch.run_original(model)
    if not ran:
        for item in mine:
            item.calls = [c for c in item.calls if c.batch is None]
    return batch


# ---- observed types of every tree class --------------------------------------------------------

def tree_methods(modules: Mapping[str, types.ModuleType], tree: Tree) -> Methods:
    """Code objects of the methods of every class defined at the top level of a tree module
    (what a model's instances and their tree bases run), each under ``file<NUL>Class``, and of
    its module-level functions, under ``file<NUL>`` + OBSERVED_FUNCTIONS."""
    found: Methods = {}
    for name, module in modules.items():
        file = module_file(module)
        if file is None:
            continue
        try:
            resolved = str(Path(file).resolve())
            members = list(vars(module).values())
        except (OSError, RuntimeError, ValueError, TypeError):
            continue
        for cls in members:
            if (not isinstance(cls, type) or cls.__module__ != name
                    or "<locals>" in cls.__qualname__):
                continue
            key = f"{resolved}{_KEY_SEPARATOR}{cls.__qualname__}"
            found.update(class_methods(cls, key, file))
        with contextlib.suppress(OSError, RuntimeError, ValueError, TypeError):
            found.update(module_functions(
                module, f"{resolved}{_KEY_SEPARATOR}{OBSERVED_FUNCTIONS}", file))
    return found


def types_by_file(recorder: TypeRecorder, wanted: set[tuple[str, str]]) -> dict[str, TypeTable]:
    """The recorder's tables of the ``wanted`` (file, class) pairs, by file."""
    found: dict[str, TypeTable] = {}
    for key, methods in recorder.strings().items():
        file, _, name = key.partition(_KEY_SEPARATOR)
        if (file, name) in wanted:
            found.setdefault(file, {})[name] = methods
    return found


def lineage(cls: type, rename: Mapping[str, str], tree: Tree) -> tuple[tuple[str, str], ...]:
    """(file, qualname) of ``cls`` and of its bases defined in tree files (a class of the
    rewritten tree by the original file it stands for)."""
    found = []
    for base in cls.__mro__:
        origin = class_origin(base, rename)
        if origin is not None and tree.holds(origin[0]):
            found.append(origin)
    return tuple(found)


# ---- the rewritten tree: overlay files served from temporary copies ---------------------------

class OverlayFinder(importlib.abc.MetaPathFinder):
    """Serves each module whose file is a key of ``overlay`` from a temporary file holding the
    new text (the same file name, in a folder of its own); a package keeps the original's
    ``__path__`` so its other modules are found where they are."""

    def __init__(self, overlay: Mapping[str, str], workdir: Path) -> None:
        self.overlay = {str(Path(path).resolve()): text for path, text in overlay.items()}
        self.workdir = workdir
        self.rename: dict[str, str] = {}        # temporary file -> original resolved path
        self._written: dict[str, str] = {}      # original -> temporary file

    def temporary(self, original: str) -> str:
        if original not in self._written:
            folder = self.workdir / f"overlay-{len(self._written)}"
            folder.mkdir(parents=True)
            target = folder / Path(original).name
            target.write_text(self.overlay[original], encoding="utf-8")
            self._written[original] = str(target)
            self.rename[str(target)] = original
        return self._written[original]

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not spec.has_location:
            return None
        try:
            origin = str(Path(spec.origin).resolve())
        except (OSError, RuntimeError, ValueError):
            return None
        if origin not in self.overlay:
            return None
        return importlib.util.spec_from_file_location(
            fullname, self.temporary(origin),
            submodule_search_locations=spec.submodule_search_locations)


@contextlib.contextmanager
def installed(finder: importlib.abc.MetaPathFinder) -> Iterator[None]:
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)


def import_model_module(name: str, path: Path, finder: OverlayFinder | None
                        ) -> types.ModuleType:
    """The model's module under its real name ``name`` (through the import system, so the
    overlay finder serves it and its package), else loaded from its file."""
    if all(part.isidentifier() for part in name.split(".")):
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
            file = module_file(module)
            if finder is not None and file is not None:
                file = finder.rename.get(file, file)
            if file is not None and Path(file).resolve() == path:
                return module
            # Another module answers to that name (a top-level file named like a library's
            # module): load ours under a name of its own.
            name = f"_tsfix_model_{name.replace('.', '_')}"
    source = path
    if finder is not None and str(path) in finder.overlay:
        source = Path(finder.temporary(str(path)))
    return load_module(name, source)


# ---- errors and where they point ---------------------------------------------------------------

def renamed(text: str, rename: Mapping[str, str]) -> str:
    for temp, real in rename.items():
        text = text.replace(temp, real)
    return text


def script_message(exc: BaseException, rename: Mapping[str, str]) -> str:
    """TorchScript's message before its first source location, on one line."""
    text = renamed(str(exc), rename)
    site = _SITE.search(text)
    head = text[:site.start()] if site else text
    lines = [line.strip() for line in head.splitlines() if line.strip() not in ("", ":")]
    joined = " ".join(lines).rstrip(":").strip()
    return (joined or type(exc).__name__)[:300]


def scope_at(text: str, line: int) -> str | None:
    """``Class.method``, ``function`` or ``Class`` holding ``line`` of ``text`` (the innermost;
    a property's getter and setter share a name, so every definition is looked at)."""
    best: tuple[int, str] | None = None
    for first, last, name in _definitions(text):
        if first <= line <= last and (best is None or first >= best[0]):
            best = (first, name)
    return best[1] if best else None


@functools.lru_cache(maxsize=16)
def _definitions(text: str) -> tuple[tuple[int, int, str], ...]:
    """Each definition of ``text`` nested only in definitions: (first line with decorators,
    last line, dotted name), outer before inner. Kept for the next jobs: the original and
    each round's rewrite of a model's file are asked again and again."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return ()
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                found.append((first, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.")

    visit(tree, "")
    return tuple(found)


class Texts:
    """The text of each tree file as the worker imported it: the overlay's for a rewritten
    file, else the file on disk."""

    def __init__(self, overlay: Mapping[str, str]) -> None:
        self.overlay = {str(Path(p).resolve()): t for p, t in overlay.items()}
        self._read: dict[str, str | None] = {}

    def get(self, path: str) -> str | None:
        if path in self.overlay:
            return self.overlay[path]
        if path not in self._read:
            try:
                self._read[path] = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                self._read[path] = None
        return self._read[path]


def blocker_of(exc: BaseException, rename: Mapping[str, str], tree: Tree,
               texts: Texts) -> Blocker:
    """The first ``File "...", line N`` of TorchScript's message that lies in the tree."""
    message = renamed(str(exc), rename).strip()
    for site in _SITE.finditer(message):
        if not tree.holds(site.group(1)):
            continue
        path = str(Path(site.group(1)).resolve())
        line = int(site.group(2))
        text = texts.get(path)
        return Blocker(path, line, scope_at(text, line) if text else None, message)
    return Blocker(None, None, None, message)


def error_site(exc: BaseException, rename: Mapping[str, str], tree: Tree
               ) -> tuple[str, int] | None:
    """Where in the tree an exception of Python code was raised: a syntax error's place, else
    the innermost traceback frame in a tree file."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        file = rename.get(exc.filename, exc.filename)
        if tree.holds(file):
            return str(Path(file).resolve()), exc.lineno
    found = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        file = rename.get(frame.f_code.co_filename, frame.f_code.co_filename)
        if tree.holds(file):
            found = (str(Path(file).resolve()), line)
    return found


# ---- the job -----------------------------------------------------------------------------------

@dataclass
class Original:
    """The original model's run: per configuration the model, the outputs of every call, and
    the tree instances it holds with their recorded calls."""

    configs: list[Instance]
    models: list[torch.nn.Module]
    outputs: list[list[Any]]
    seen: list[Seen]
    module: types.ModuleType
    types: dict[str, TypeTable] = field(default_factory=dict)
    # Per configuration, its first call at the second batch size (None: no batch axis).
    batches: list[OtherBatch | None] = field(default_factory=list)

    def calls(self, k: int) -> list[Expected]:
        """Configuration ``k``'s calls and the outputs the rewrite must reproduce."""
        inst = self.configs[k]
        return [(inst.label(j), args, kwargs, self.outputs[k][j])
                for j, (args, kwargs) in enumerate(inst.calls)]

    def batch(self, k: int) -> OtherBatch | None:
        return self.batches[k] if k < len(self.batches) else None


class ModelFailure(Exception):
    """The original model cannot be imported, built or run: the job's ``failure``."""


def run_model_job(job: ModelJob) -> ModelResult:
    started = time.perf_counter()
    path = Path(job.path).resolve()
    importlib.invalidate_caches()
    with import_context(job) as load:
        tree = tree_of(job, path, load.package, _package_root(path, load.package))
        name = f"{load.package}.{load.stem}" if load.package else load.stem
        try:
            original = run_original(job, name, path, tree, observe=job.mode == "observe")
        except ModelFailure as failure:
            return ModelResult(job.id, failure=str(failure))
        reached: dict[str, list[str]] = {}
        for seen in original.seen:
            for file, class_name in seen.lineage:
                names = reached.setdefault(file, [])
                if class_name not in names:
                    names.append(class_name)
        originals = tree_modules(tree)
        files = tuple(sorted({str(Path(f).resolve()) for m in originals.values()
                              if (f := module_file(m)) is not None and tree.holds(f)}))
        texts = Texts({})
        before, scripted_before = (export_original(original, tree, texts)
                                   if job.target == "export"
                                   else script_original(original, tree, texts))
        held = {file: tuple(names) for file, names in reached.items()}
        if job.mode == "observe":
            before = ModelVerdict(before.status, before.reason, scripted_before, before.blocker,
                                  duration_s=round(time.perf_counter() - started, 3))
            return ModelResult(job.id, before, types=original.types, reached=held, files=files)
        classes, verdict = validate(ModelFile(job, name, path, tree, load), original,
                                    originals, files)
        if not {str(Path(file).resolve()) for file in job.overlay} & set(files):
            # Nothing the model imports was rewritten: the model judged is the original, so
            # whatever it fails, it failed before tsfix (the check of the original above is
            # one call of one configuration; this one is every configuration).
            scripted_before = scripted_before and verdict.status == "scripts"
        verdict = ModelVerdict(verdict.status, verdict.reason, scripted_before,
                               verdict.blocker, verdict.python_only,
                               round(time.perf_counter() - started, 3))
        return ModelResult(job.id, verdict, tuple(classes), reached=held, files=files)


def _package_root(path: Path, package: str) -> Path:
    folder = path.parent
    for _ in package.split(".") if package else ():
        folder = folder.parent
    return folder


def run_original(job: ModelJob, name: str, path: Path, tree: Tree, *,
                 observe: bool) -> Original:
    """Import, build and run the original model, recording its tree instances' calls (and,
    ``observe``, the types of the tree's methods)."""
    try:
        module = import_model_module(name, path, None)
    except BaseException as exc:
        raise ModelFailure(f"importing the original failed: {short_error(exc)}") from exc
    cls = getattr(module, job.name, None)
    if not isinstance(cls, type):
        raise ModelFailure(f"class {job.name} is not defined at module level of {path.name}")
    try:
        configs = instances(job.example, cls)
    except Verdict as outcome:
        raise ModelFailure(outcome.reason) from outcome
    recorder = TypeRecorder(tree_methods(tree_modules(tree), tree) if observe else {})
    typing = recorder.active if observe else contextlib.nullcontext
    calls = Recorder()
    models: list[torch.nn.Module] = []
    outputs: list[list[Any]] = []
    seen: list[Seen] = []
    batches: list[OtherBatch | None] = []
    for k, inst in enumerate(configs):
        try:
            with typing():
                model = build(cls, inst.init)
        except BaseException as exc:
            raise ModelFailure(f"the original constructor raised for "
                               f"{inst.label(show_init=True)}: {short_error(exc)}") from exc
        if not isinstance(model, torch.nn.Module):
            raise ModelFailure(f"{job.name} is not a torch.nn.Module")
        mine = []
        for sub_path, sub in model.named_modules():
            origin = class_origin(type(sub), {})
            if (origin is not None and tree.holds(origin[0])
                    and not isinstance(sub, torch.jit.ScriptModule)):
                mine.append(Seen(k, sub_path, sub, *origin,
                                 lineage=lineage(type(sub), {}, tree)))
        wanted = []
        with calls.attached(mine):
            for j, (args, kwargs) in enumerate(inst.calls):
                try:
                    with typing():
                        wanted.append(call(model, args, kwargs))
                except BaseException as exc:
                    raise ModelFailure(f"the original forward raised for {inst.label(j)}: "
                                       f"{short_error(exc)}") from exc
        if observe:
            observe_other_batch(recorder, model, inst)
        else:
            for j, (args, kwargs) in enumerate(inst.calls):
                if difference(wanted[j], call(model, args, kwargs)) is not None:
                    raise ModelFailure(f"nondeterministic model: two identical calls differ "
                                       f"for {inst.label(j)}")
            batches.append(record_other_batch(model, inst, mine, calls))
        models.append(model)
        outputs.append(wanted)
        seen.extend(mine)
    found = Original(configs, models, outputs, seen, module, batches=batches)
    if observe:
        reached = {key for s in seen for key in s.lineage}
        # The functions of the files those classes live in are what their methods can call.
        reached |= {(file, OBSERVED_FUNCTIONS) for file, _ in reached}
        found.types = types_by_file(recorder, reached)
    return found


def export_original(original: Original, tree: Tree, texts: Texts
                    ) -> tuple[ModelVerdict, bool]:
    """Whether the original model (its first configuration, first call) exports with
    torch.export and its program survives ``torch.export.save``/``load``, as a verdict (the
    export target's "scripts" status). The rewritten model is judged on both
    (export.check_model): an original whose own program cannot be saved did not export
    before tsfix, and the rewrite failing there too is not a new failure."""
    from tsfix.codemods.validation import export as ex

    args, kwargs = original.configs[0].calls[0]
    try:
        program = ex.export(original.models[0], args, kwargs)
    except Exception as exc:
        return ModelVerdict("fails", f"the original does not export: {ex.describe(exc, {})}",
                            False, export_blocker(exc, {}, tree, texts)), False
    try:
        ex.reloaded_program(program, {})
    except Verdict as outcome:
        return ModelVerdict("fails", f"the original does not export: {outcome.reason}",
                            False), False
    return ModelVerdict("scripts", "the original exports (and survives save/load)",
                        True), True


def export_blocker(exc: BaseException, rename: Mapping[str, str], tree: Tree,
                   texts: Texts) -> Blocker:
    """Where torch.export stopped: the innermost frame in the tree of its error (message
    sites first, then the traceback), and the error in one line."""
    from tsfix.codemods.validation import export as ex

    message = ex.describe(exc, dict(rename))
    site = ex.user_site(exc, lambda file: tree.holds(rename.get(file, file)))
    if site is None:
        return Blocker(None, None, None, message)
    path = str(Path(rename.get(site[0], site[0])).resolve())
    text = texts.get(path)
    return Blocker(path, site[1], scope_at(text, site[1]) if text else None, message)


def script_original(original: Original, tree: Tree, texts: Texts
                    ) -> tuple[ModelVerdict, bool]:
    """Whether the original model (its first configuration) scripts, as a verdict."""
    try:
        script(original.models[0])
    except BaseException as exc:
        return ModelVerdict("fails", f"the original does not script: {script_message(exc, {})}",
                            False, blocker_of(exc, {}, tree, texts)), False
    return ModelVerdict("scripts", "the original scripts", True), True


@dataclass(frozen=True)
class ModelFile:
    """A model job's model: the job, its module's import name and file, which files are the
    model's (``tree``), and the job's imports (their folder holds the overlay's files)."""

    job: ModelJob
    name: str
    path: Path
    tree: Tree
    load: Imports


@dataclass(frozen=True)
class Trees:
    """A validate job's original and rewritten tree: the files that are the model's
    (``tree``), their texts as imported, the overlay's temporary files (``rename``: temporary
    file -> tree file), the original's modules, and the listed classes by (resolved file,
    name)."""

    tree: Tree
    texts: Texts
    rename: Mapping[str, str]
    originals: Mapping[str, types.ModuleType]
    listed: Mapping[tuple[str, str], ModelClass]

    def rewritten(self) -> dict[str, types.ModuleType]:
        """The rewritten tree's modules imported so far."""
        return tree_modules(self.tree, self.rename)


def validate(model: ModelFile, original: Original, originals: dict[str, types.ModuleType],
             files: Sequence[str]) -> tuple[list[ModelClassVerdict], ModelVerdict]:
    """Import the rewritten tree, build the rewritten model, and judge the listed classes and
    the model."""
    job = model.job
    finder = OverlayFinder(job.overlay, model.load.workdir)
    # The model imports no rewritten file: the tree as tsfix leaves it is the original one
    # (rules never add imports of the tree), so its modules serve as they are.
    if any(file in finder.overlay for file in files):
        for module_name in originals:
            sys.modules.pop(module_name, None)
    started = time.perf_counter()
    listed = {(str(Path(c.path).resolve()), c.name): c for c in job.classes}
    trees = Trees(model.tree, Texts(job.overlay), finder.rename, originals, listed)
    reached = [c for key, c in listed.items() if any(key in s.lineage for s in original.seen)]
    label = _model_label(job, model.path, model.tree)
    with installed(finder):
        models = rewritten_models(model, original, finder, trees, reached)
        if not isinstance(models, list):
            return models
        verdicts = [reached_verdict(c, original, models, trees, label, job.target)
                    for c in reached]
        outputs, raised = eager_run(original, models)
        if raised is not None:
            error_raised, where = raised
            error = short_error(error_raised, finder.rename)
            why = f"the rewritten model raised for {where}"
            failure = NewFailure(error_raised, f"eager from model {label}: {why}", error, trees)
            verdicts = [_rejected_if_blamed(v, failure, listed) for v in verdicts]
            verdict_of_model = ModelVerdict("fails", f"eager parity: {why}"
                                                     f"{failure.stops_at()}: {error}")
        else:
            verdict_of_model = model_verdict(original, models, trees, job.target, outputs)
        return verdicts, ModelVerdict(
            verdict_of_model.status, verdict_of_model.reason, None, verdict_of_model.blocker,
            verdict_of_model.python_only, round(time.perf_counter() - started, 3))


def rewritten_models(model: ModelFile, original: Original, finder: OverlayFinder,
                     trees: Trees, reached: list[ModelClass]
                     ) -> list[torch.nn.Module] | tuple[list[ModelClassVerdict], ModelVerdict]:
    """The rewritten model per configuration, with the original's weights; or, when the
    rewritten tree does not import or the model does not build, the verdicts of the
    ``reached`` listed classes and of the model."""
    try:
        with overloads_apart(trees.originals):
            module = import_model_module(model.name, model.path, finder)
        cls = getattr(module, model.job.name)
    except BaseException as exc:
        error = short_error(exc, finder.rename)
        site = error_site(exc, finder.rename, trees.tree)
        why = f"the rewritten tree does not import: {error}"
        blocker = Blocker(site[0], site[1], scope_at(trees.texts.get(site[0]) or "", site[1]),
                          error) if site else None
        file = site[0] if site else None
        return ([ModelClassVerdict(c.path, ClassVerdict(c.name, *_blame(c, file, why)))
                 for c in reached], ModelVerdict("fails", why, blocker=blocker))
    models = []
    for k, inst in enumerate(original.configs):
        try:
            new = build(cls, inst.init)
            new.load_state_dict(original.models[k].state_dict())
        except BaseException as exc:
            # The original built and ran with this table: the error is the rewrite's.
            error = short_error(exc, finder.rename)
            why = f"the rewritten model does not build for {inst.label(show_init=True)}"
            label = _model_label(model.job, model.path, model.tree)
            failure = NewFailure(exc, f"build from model {label}: {why}", error, trees)
            stops = failure.stops_at()
            return ([ModelClassVerdict(c.path, ClassVerdict(c.name, *failure.verdict(c)))
                     for c in reached], ModelVerdict("fails", f"build: {why}{stops}: {error}"))
        models.append(new)
    return models


def reached_verdict(model_class: ModelClass, original: Original,
                    models: Sequence[torch.nn.Module], trees: Trees, label: str, target: str
                    ) -> ModelClassVerdict:
    """A listed class the model reaches, judged on the model's instances of it."""
    from tsfix.codemods.validation.reached import check_reached_class

    key = (str(Path(model_class.path).resolve()), model_class.name)
    rename = dict(trees.rename)
    pairs, unpaired = pair_instances(key, original, models, rename, trees.tree)
    started = time.perf_counter()
    verdict: VerdictName
    try:
        if unpaired:
            raise unverified(unpaired)
        codes = string_codes_of(model_class, trees.rewritten(), rename, target)
        reason = check_reached_class(ReachedCase(
            model_class, pairs, len(original.configs) > 1, label, rename, target, codes))
        verdict = VERIFIED
    except Verdict as outcome:
        verdict, reason = outcome.verdict, outcome.reason
    except BaseException as exc:
        verdict, reason = UNVERIFIED, f"validation error: {short_error(exc, rename)}"
    return ModelClassVerdict(model_class.path, ClassVerdict(
        model_class.name, verdict, reason, round(time.perf_counter() - started, 3)))


def _rejected_if_blamed(found: ModelClassVerdict, failure: NewFailure,
                        listed: Mapping[tuple[str, str], ModelClass]) -> ModelClassVerdict:
    """``found``, or rejected when the rewritten model's own run raised in its code."""
    model_class = listed.get((str(Path(found.path).resolve()), found.verdict.name))
    if model_class is None or found.verdict.verdict == REJECTED:
        return found
    verdict, reason = failure.verdict(model_class)
    if verdict != REJECTED:
        return found
    return ModelClassVerdict(found.path, ClassVerdict(found.verdict.name, verdict, reason,
                                                      found.verdict.duration_s))


@dataclass(frozen=True)
class Frame:
    """A frame of an error's traceback that implicates a listed class."""

    key: tuple[str, str]                # (resolved original file, class) of the listed class
    site: str                           # "RNN.py:1169 (LiGRU.forward)", or how it is involved
    changed: bool                       # the frame runs code the rewrite changed or added


class NewFailure:
    """An error the rewritten model raises where the original built and ran with the same
    table: new, so the rewrite's. The listed classes it is blamed on (:meth:`blamed`) are
    rejected, the others not checked. Blamed: the class of the innermost traceback frame that
    runs a listed class's code (a frame in its span of the rewritten file, or a frame whose
    ``self`` is an instance of it: the class being built or called), and every outer listed
    class whose frame runs a function its rewrite changed (the error may come from what that
    code passed on)."""

    def __init__(self, exc: BaseException, why: str, error: str, trees: Trees) -> None:
        self.exc = exc
        self.why = why
        self.error = error
        self.rename = dict(trees.rename)
        self.tree = trees.tree
        self.texts = trees.texts
        self.originals = trees.originals
        self.rewritten = trees.rewritten()
        self.listed = set(trees.listed)

    def verdict(self, model_class: ModelClass) -> tuple[VerdictName, str]:
        """Rejected with where the traceback runs its code, else not checked."""
        frame = self.blamed.get((str(Path(model_class.path).resolve()), model_class.name))
        if frame is None:
            return UNVERIFIED, f"{NOT_CHECKED}{self.why}: {self.error}"
        return REJECTED, f"{self.why} at {frame.site}: {self.error}"

    def stops_at(self) -> str:
        """`` at file:line (scope)`` of the innermost traceback frame in the tree, or ""."""
        site = error_site(self.exc, self.rename, self.tree)
        return "" if site is None else f" at {self._site(*site)}"

    @functools.cached_property
    def blamed(self) -> dict[tuple[str, str], Frame]:
        frames = self.frames()
        found = {frame.key: frame for frame in frames if frame.changed}
        if frames:
            found.setdefault(frames[-1].key, frames[-1])
        return found

    def frames(self) -> list[Frame]:
        """The traceback's frames (and its causes', raised deeper) that run a listed class's
        code or call an instance of it, outermost first."""
        found: list[Frame] = []
        exc: BaseException | None = self.exc
        seen: set[int] = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            for frame, line in traceback.walk_tb(exc.__traceback__):
                item = self._frame(frame, line)
                if item is not None:
                    found.append(item)
            exc = exc.__cause__
        return found

    def _frame(self, frame: types.FrameType, line: int) -> Frame | None:
        temporary = frame.f_code.co_filename
        file = self.rename.get(temporary, temporary)
        if self.tree.holds(file):
            path = str(Path(file).resolve())
            scope = scope_at(self.texts.get(path) or "", line)
            for key in self.listed:
                if key[0] == path and scope is not None and (
                        scope == key[1] or scope.startswith(key[1] + ".")):
                    return Frame(key, self._site(path, line), self._changed(key[0], temporary,
                                                                             line))
        try:
            instance = frame.f_locals.get("self")
        except Exception:
            return None
        if isinstance(instance, torch.nn.Module):
            origin = class_origin(type(instance), self.rename)
            if origin in self.listed:
                assert origin is not None
                return Frame(origin, f"a call of {type(instance).__qualname__} "
                                     f"({frame.f_code.co_name})", False)
        return None

    def _changed(self, path: str, temporary: str, line: int) -> bool:
        old = module_at(self.originals, path, {})
        new = module_at(self.rewritten, path, self.rename)
        if old is None or new is None:
            return True
        return changed_at((temporary, line), old, new)

    def _site(self, path: str, line: int) -> str:
        text = self.texts.get(path)
        scope = scope_at(text, line) if text else None
        return f"{Path(path).name}:{line}" + (f" ({scope})" if scope else "")


def eager_run(original: Original, models: list[torch.nn.Module]
              ) -> tuple[list[list[Any]], tuple[BaseException, str] | None]:
    """The rewritten model's outputs for the original's calls (per configuration), or the
    first error it raises and for which call."""
    outputs: list[list[Any]] = []
    for inst, model in zip(original.configs, models, strict=True):
        outputs.append([])
        for j, (args, kwargs) in enumerate(inst.calls):
            try:
                outputs[-1].append(call(model, args, kwargs))
            except BaseException as exc:
                return outputs, (exc, inst.label(j))
    return outputs, None


def _blame(model_class: ModelClass, file: str | None, why: str) -> tuple[VerdictName, str]:
    """Rejected for every class of the ``file`` that does not import, wherever in it the
    error is; not checked for the others."""
    if file is not None and file == str(Path(model_class.path).resolve()):
        return REJECTED, why
    return UNVERIFIED, f"{NOT_CHECKED}{why}"


def _model_label(job: ModelJob, path: Path, tree: Tree) -> str:
    for base in (tree.root if job.root else None, tree.root.parent):
        if base is None:
            continue
        with contextlib.suppress(ValueError):
            return f"{path.relative_to(base).as_posix()}:{job.name}"
    return f"{path.name}:{job.name}"


def pair_instances(key: tuple[str, str], original: Original,
                   models: Sequence[torch.nn.Module], rename: Mapping[str, str], tree: Tree
                   ) -> tuple[list[Pair], str | None]:
    """Each original instance of the class ``key`` with the rewritten model's module at the
    same path; or why they cannot be paired."""
    pairs = []
    by_config = [dict(model.named_modules()) for model in models]
    for seen in original.seen:
        if key not in seen.lineage:
            continue
        new = by_config[seen.config].get(seen.path)
        if new is None or lineage(type(new), rename, tree) != seen.lineage:
            where = seen.path or "the model"
            held = type(new).__qualname__ if new is not None else "nothing"
            return [], (f"the rewritten model holds {held} at {where}, where the original "
                        f"holds {seen.name}: its instances cannot be compared")
        pairs.append(Pair(seen, new))
    return pairs, None


def string_codes_of(model_class: ModelClass, rewritten: Mapping[str, types.ModuleType],
                    rename: Mapping[str, str], target: str) -> dict[str, dict[str, int]]:
    """The int codes of the class's str settings in its rewritten file (the onnx and export
    targets take settings as tensors)."""
    new_file = module_at(rewritten, model_class.path, rename)
    file = module_file(new_file) if new_file is not None else None
    if target not in ("onnx", "export") or file is None:
        return {}
    from tsfix.codemods.validation.export import string_codes

    try:
        return string_codes(Path(file).read_text(encoding="utf-8"), model_class.name)
    except (OSError, UnicodeDecodeError):
        return {}


def module_at(modules: Mapping[str, types.ModuleType], path: str, rename: Mapping[str, str]
              ) -> types.ModuleType | None:
    """The module of ``modules`` loaded from ``path`` (or from its overlay copy)."""
    wanted = str(Path(path).resolve())
    for module in modules.values():
        file = module_file(module)
        if file is not None and str(Path(rename.get(file, file)).resolve()) == wanted:
            return module
    return None


# ---- the model verdict -------------------------------------------------------------------------

def model_verdict(original: Original, models: list[torch.nn.Module], trees: Trees,
                  target: str, outputs: Sequence[Sequence[Any]]) -> ModelVerdict:
    """The rewritten model against the ORIGINAL eager outputs: eager parity (``outputs``:
    the rewritten model's, :func:`eager_run`), script, the scripted outputs, save/load. Under
    the target ``export``, torch.export replaces TorchScript: "scripts" then means every
    configuration exports and its programs (and their saved and loaded copies) reproduce the
    original's eager outputs."""
    rename = dict(trees.rename)
    eager = Check("eager parity: the rewritten model raised for {label}: {error}",
                  "eager parity: {found} for {label}", rename)
    try:
        for k, inst in enumerate(original.configs):
            for j, (_, _, _, want) in enumerate(original.calls(k)):
                found = difference(want, outputs[k][j])
                if found:
                    raise rejected(f"eager parity: {found} for {inst.label(j)}")
        for k, model in enumerate(models):
            at_other_batch(model, original.batch(k), eager, original.configs[k].label(0))
    except Verdict as outcome:
        return ModelVerdict("fails", outcome.reason)
    if target == "export":
        from tsfix.codemods.validation.export import check_model

        checked = check_model(original.configs, models, original.outputs, rename)
        if checked.ok:
            return ModelVerdict("scripts", checked.reason + other_batch_note(
                original.batches, EXPORT_OTHER_BATCH))
        blocker = (export_blocker(checked.failure, rename, trees.tree, trees.texts)
                   if checked.failure is not None else None)
        return ModelVerdict("fails", checked.reason, blocker=blocker)
    return scripted_model_verdict(original, models, trees)


def scripted_model_verdict(original: Original, models: list[torch.nn.Module], trees: Trees
                           ) -> ModelVerdict:
    """Each configuration's rewritten model scripted, and the scripted module and its saved
    and loaded copy reproducing the original's eager outputs (at the second batch size too).
    A model that calls a @torch.jit.ignore function cannot be saved: Python only."""
    rename = dict(trees.rename)
    python_only = False
    for k, model in enumerate(models):
        try:
            artifact = script(model)
        except BaseException as exc:
            return ModelVerdict("fails", script_message(exc, rename),
                                blocker=blocker_of(exc, rename, trees.tree, trees.texts))
        checks: list[tuple[str, Any]] = [("script", artifact)]
        try:
            checks.append(("save/load", saved_and_loaded(artifact)))
        except BaseException as exc:
            if _PYTHON_CALL_SAVE not in str(exc):
                return ModelVerdict("fails", f"save/load: {short_error(exc, rename)}")
            python_only = True
        try:
            for step, module in checks:
                raised = f"{step}: the scripted model raised for {{label}}: {{error}}"
                reproduces(module, original.calls(k), Check(
                    raised, f"{step}: {{found}} for {{label}} (against the original's eager "
                    "output)", rename))
                at_other_batch(module, original.batch(k), Check(
                    raised, f"{step}: {{found}} for {{label}}", rename),
                    original.configs[k].label(0))
        except Verdict as outcome:
            return ModelVerdict("fails", outcome.reason)
    save = (f"save fails as expected ({PYTHON_ONLY_SAVE})" if python_only else "save/load")
    steps = "eager parity, script" if python_only else "eager parity, script, save/load"
    return ModelVerdict("scripts", f"{len(models)} configuration(s): eager parity, script, "
                                       f"parity with the original, {save}"
                                       f"{other_batch_note(original.batches, steps)}",
                        python_only=python_only)
