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
(:func:`check_reached_class`), and the model one :class:`ModelVerdict`
(:func:`model_verdict`). The original built and ran with the same table, so when the
rewritten model does not build or its own run raises, the error is new (:class:`NewFailure`):
the listed classes whose code the traceback runs are rejected, the others reached are
``not checked`` (:data:`~tsfix.codemods.validation.protocol.NOT_CHECKED`; the engine checks
them again once the rejected ones are left out).

"The tree": files under ``job.root`` (resolved) that are not in the Python installation; with no
root, the top package folder of the model's file.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import io
import os
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
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
from tsfix.codemods.validation.worker import (
    _GENERATOR_FLAGS,
    _INSTALLATION,
    _SITE,
    EXPORT_OTHER_BATCH,
    PYTHON_ONLY_SAVE,
    Imports,
    Instance,
    OtherBatch,
    TypeRecorder,
    Verdict,
    at_other_batch,
    build,
    call,
    changed_at,
    clone,
    difference,
    import_context,
    instances,
    load_module,
    module_functions,
    not_scripting,
    observe_other_batch,
    other_batch,
    other_batch_note,
    overloads_apart,
    plain_settings,
    rejected,
    save_load_step,
    script,
    short_error,
    target_settings,
    unverified,
)

__all__ = ["MAX_CALL_BYTES", "MAX_TOTAL_BYTES", "RECORDED_CALLS", "NewFailure", "OverlayFinder",
           "Tree", "blocker_of", "check_reached_class", "eager_run", "model_verdict",
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
        self._known: dict[str, bool] = {}       # a job asks about a few thousand files

    def holds(self, file: str | None) -> bool:
        if not file or file.startswith("<"):
            return False
        known = self._known.get(file)
        if known is None:
            try:
                resolved = str(Path(file).resolve())
            except (OSError, RuntimeError, ValueError):
                resolved = ""
            known = self._known[file] = (resolved.startswith(self._prefix)
                                         and not resolved.startswith(_INSTALLATION))
        return known


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
        text = self.path or "the model"
        if many_configs:
            text += f" (init[{self.config}])"
        if j is not None and len(self.calls) > 1:
            text += f" call[{j}]"
        if j is not None and j < len(self.calls) and self.calls[j].batch is not None:
            text += f" at batch size {self.calls[j].batch}"
        return text


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

Methods = dict[types.CodeType, tuple[str, str, tuple[str, ...], bool]]


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
            found.update(_class_methods(cls, key, file))
        with contextlib.suppress(OSError, RuntimeError, ValueError, TypeError):
            found.update(module_functions(
                module, f"{resolved}{_KEY_SEPARATOR}{OBSERVED_FUNCTIONS}", file))
    return found


def _class_methods(cls: type, key: str, file: str) -> Methods:
    """Like worker.methods_to_observe, for one class defined in ``file``."""
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
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    best: tuple[int, str] | None = None

    def visit(node: ast.AST, prefix: str) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                if first <= line <= (child.end_lineno or child.lineno):
                    if best is None or first >= best[0]:
                        best = (first, name)
                    visit(child, f"{name}.")

    visit(tree, "")
    return best[1] if best else None


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


def class_at(text: str | None, line: int) -> str | None:
    if text is None:
        return None
    scope = scope_at(text, line)
    return scope.split(".")[0] if scope else None


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
        classes, verdict = validate(job, name, path, tree, original, originals, files,
                                   load)
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


@dataclass(eq=False)
class Pair:
    """An instance of the original model and the same instance of the rewritten model."""

    seen: Seen
    new: torch.nn.Module


def validate(job: ModelJob, name: str, path: Path, tree: Tree, original: Original,
             originals: dict[str, types.ModuleType], files: Sequence[str], load: Imports
             ) -> tuple[list[ModelClassVerdict], ModelVerdict]:
    """Import the rewritten tree, build the rewritten model, and judge the listed classes and
    the model."""
    finder = OverlayFinder(job.overlay, load.workdir)
    # The model imports no rewritten file: the tree as tsfix leaves it is the original one
    # (rules never add imports of the tree), so its modules serve as they are.
    if any(file in finder.overlay for file in files):
        for module_name in originals:
            sys.modules.pop(module_name, None)
    texts = Texts(job.overlay)
    started = time.perf_counter()
    listed = {(str(Path(c.path).resolve()), c.name): c for c in job.classes}
    reached_listed = [c for key, c in listed.items()
                      if any(key in s.lineage for s in original.seen)]

    def nobody(culprit: tuple[str, str | None] | None, why: str, *, whole_file: bool
               ) -> list[ModelClassVerdict]:
        """Verdicts when no rewritten model exists to take instances from."""
        return [ModelClassVerdict(c.path, ClassVerdict(c.name,
                                                       *_blame(c, culprit, why, whole_file)))
                for c in reached_listed]

    with installed(finder):
        try:
            with overloads_apart(originals):
                module = import_model_module(name, path, finder)
            cls = getattr(module, job.name)
        except BaseException as exc:
            error = short_error(exc, finder.rename)
            site = error_site(exc, finder.rename, tree)
            culprit = _culprit(site, texts)
            verdicts = nobody(culprit, f"the rewritten tree does not import: {error}",
                              whole_file=True)
            blocker = Blocker(site[0], site[1], scope_at(texts.get(site[0]) or "", site[1]),
                              error) if site else None
            return verdicts, ModelVerdict("fails", f"the rewritten tree does not import: "
                                                       f"{error}", blocker=blocker)
        label = _model_label(job, path, tree)
        models = []
        for k, inst in enumerate(original.configs):
            try:
                new = build(cls, inst.init)
                new.load_state_dict(original.models[k].state_dict())
            except BaseException as exc:
                # The original built and ran with this table: the error is the rewrite's.
                error = short_error(exc, finder.rename)
                why = f"the rewritten model does not build for {inst.label(show_init=True)}"
                failure = NewFailure(exc, f"build from model {label}: {why}", error,
                                     finder.rename, tree, texts, originals,
                                     tree_modules(tree, finder.rename), listed)
                stops = failure.stops_at()
                return ([ModelClassVerdict(c.path, ClassVerdict(c.name, *failure.verdict(c)))
                         for c in reached_listed],
                        ModelVerdict("fails", f"build: {why}{stops}: {error}"))
            models.append(new)
        rewritten_modules = tree_modules(tree, finder.rename)
        verdicts = []
        for model_class in reached_listed:
            key = (str(Path(model_class.path).resolve()), model_class.name)
            pairs, unpaired = pair_instances(key, original, models, finder.rename, tree)
            class_started = time.perf_counter()
            verdict: VerdictName
            try:
                if unpaired:
                    raise unverified(unpaired)
                reason = check_reached_class(model_class, pairs, len(original.configs) > 1,
                                             label, finder.rename, originals, rewritten_modules,
                                             job.target)
                verdict = VERIFIED
            except Verdict as outcome:
                verdict, reason = outcome.verdict, outcome.reason
            except BaseException as exc:
                verdict, reason = UNVERIFIED, (f"validation error: "
                                               f"{short_error(exc, finder.rename)}")
            verdicts.append(ModelClassVerdict(model_class.path, ClassVerdict(
                model_class.name, verdict, reason,
                round(time.perf_counter() - class_started, 3))))
        outputs, raised = eager_run(original, models)
        if raised is not None:
            error_raised, where = raised
            error = short_error(error_raised, finder.rename)
            why = f"the rewritten model raised for {where}"
            failure = NewFailure(error_raised, f"eager from model {label}: {why}", error,
                                 finder.rename, tree, texts, originals, rewritten_modules,
                                 listed)
            verdicts = [_rejected_if_blamed(v, failure, listed) for v in verdicts]
            verdict_of_model = ModelVerdict("fails", f"eager parity: {why}"
                                                     f"{failure.stops_at()}: {error}")
        else:
            verdict_of_model = model_verdict(original, models, finder.rename, tree, texts,
                                             job.target, outputs)
        return verdicts, ModelVerdict(
            verdict_of_model.status, verdict_of_model.reason, None, verdict_of_model.blocker,
            verdict_of_model.python_only, round(time.perf_counter() - started, 3))


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

    def __init__(self, exc: BaseException, why: str, error: str, rename: Mapping[str, str],
                 tree: Tree, texts: Texts, originals: Mapping[str, types.ModuleType],
                 rewritten: Mapping[str, types.ModuleType],
                 listed: Iterable[tuple[str, str]]) -> None:
        self.exc = exc
        self.why = why
        self.error = error
        self.rename = dict(rename)
        self.tree = tree
        self.texts = texts
        self.originals = originals
        self.rewritten = rewritten
        self.listed = set(listed)

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


def _culprit(site: tuple[str, int] | None, texts: Texts) -> tuple[str, str | None] | None:
    """(file, class) an error of the rewritten tree points into."""
    if site is None:
        return None
    return site[0], class_at(texts.get(site[0]), site[1])


def _blame(model_class: ModelClass, culprit: tuple[str, str | None] | None, why: str,
           whole_file: bool) -> tuple[VerdictName, str]:
    """Rejected for the class the error is in (``whole_file``: every class of a file that
    does not import, wherever in it); not checked for the others."""
    if culprit is not None and culprit[0] == str(Path(model_class.path).resolve()) and (
            culprit[1] == model_class.name or whole_file):
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


# ---- one class, from the model's instances -----------------------------------------------------

def check_reached_class(model_class: ModelClass, pairs: list[Pair], many_configs: bool,
                        model_label: str, rename: Mapping[str, str],
                        originals: Mapping[str, types.ModuleType],
                        rewritten: Mapping[str, types.ModuleType],
                        target: str = "torchscript") -> str:
    """A verified reason, or raises :class:`~tsfix.codemods.validation.worker.Verdict`.
    Under the target ``export``, torch.export replaces re-scripting
    (:func:`tsfix.codemods.validation.export.check_reached`)."""
    name = model_class.name
    rename = dict(rename)
    lifted = dict(model_class.lifted)
    called = [p for p in pairs if p.seen.calls]
    never = [p for p in pairs if not p.seen.calls]
    if not called:
        why = next((p.seen.not_recorded for p in never if p.seen.not_recorded), None)
        where = ", ".join(p.seen.label(many_configs) for p in never[:3])
        if why:
            raise unverified(f"from model {model_label}: the inputs of its {len(pairs)} "
                             f"instance(s) ({where}) were not recorded: {why}")
        raise unverified(f"from model {model_label}: the model holds {len(pairs)} instance(s) "
                         f"of {name} ({where}), and its examples never call them (a call "
                         "through .forward() directly is not seen)")

    # Each original instance alone on its recorded inputs reproduces its recorded output.
    for p in called:
        for j, recorded in enumerate(p.seen.calls):
            where = p.seen.label(many_configs, j)
            try:
                again = call(p.seen.module, recorded.args, recorded.kwargs)
            except BaseException as exc:
                raise unverified(f"from model {model_label}: the original {where} raises when "
                                 f"called alone on its recorded inputs: "
                                 f"{short_error(exc)}") from exc
            if difference(recorded.output, again) is not None:
                raise unverified(f"from model {model_label}: the original {where} gives other "
                                 "outputs when called again on its recorded inputs "
                                 "(nondeterministic or stateful)")

    # Eager parity of every rewritten instance on its own inputs.
    for p in called:
        for j, recorded in enumerate(p.seen.calls):
            where = p.seen.label(many_configs, j)
            try:
                got = call(p.new, recorded.args, recorded.kwargs)
            except BaseException as exc:
                raise rejected(f"eager parity: the rewritten {where} raised on its inputs "
                               f"from model {model_label}: {short_error(exc, rename)}") from exc
            found = difference(recorded.output, got)
            if found:
                raise rejected(f"eager parity: {found} for {where} (inputs from model "
                               f"{model_label})")

    # Which instances one artifact must serve: the first's parameter shapes. One that also
    # differs in a setting that is not lifted is served when it can be; when it cannot, that
    # setting explains it (not comparable), as worker.check_class does.
    # With lifted arguments, only instances that run this class's forward take them (a
    # subclass may define a forward of its own).
    key = (str(Path(model_class.path).resolve()), name)
    notes = Notes()
    lifting = [p for p in called if not lifted or _forward_owner(type(p.new), rename) == key]
    for p in called:
        if p not in lifting:
            notes.add("of a subclass with a forward of its own", p.seen.label(many_configs))
    # The artifact is the first instance of the largest group with equal weight shapes (the
    # check then covers the most instances).
    groups: dict[str, list[Pair]] = {}
    for p in lifting:
        groups.setdefault(repr(sorted(_shapes(p.seen.module).items())), []).append(p)
    first = max(groups.values(), key=len)[0] if groups else called[0]
    base_shapes = _shapes(first.seen.module)
    base_settings = settings_of(first.new, set(lifted.values()))
    candidates: list[Pair] = []
    excusable: dict[int, str] = {}
    for p in lifting:
        if _shapes(p.seen.module) != base_shapes:
            notes.add("with other parameter shapes", p.seen.label(many_configs))
            continue
        settings = settings_of(p.new, set(lifted.values()))
        differing = sorted(k for k in settings.keys() | base_settings.keys()
                           if settings.get(k) != base_settings.get(k))
        if differing:
            excusable[id(p)] = ", ".join(differing[:3])
        candidates.append(p)

    def lifted_values(p: Pair) -> dict[str, Any]:
        missing = [attr for attr in lifted.values() if not hasattr(p.new, attr)]
        if missing:
            raise rejected(f"one artifact: the rewritten {p.seen.label(many_configs)} has no "
                           f"attribute {missing[0]} (lifted)")
        values = {param: getattr(p.new, attr) for param, attr in lifted.items()}
        return target_settings(values, lifted, codes, target)

    codes: dict[str, dict[str, int]] = {}
    new_file = module_at(rewritten, model_class.path, rename)
    if target in ("onnx", "export") and new_file is not None and module_file(new_file):
        from tsfix.codemods.validation.export import string_codes

        with contextlib.suppress(OSError, UnicodeDecodeError):
            codes = string_codes(Path(str(module_file(new_file))).read_text(encoding="utf-8"),
                                 name)

    def check_artifact(module: Any, step: str, serving: list[Pair], lenient: bool,
                       with_lifted: bool = True) -> list[Pair]:
        # A scripted module shares its parameters with the instance it was scripted from (a
        # module of the rewritten model, which the model verdict still runs): put them back.
        kept = {key: value.detach().clone() for key, value in module.state_dict().items()}
        try:
            return serve(module, step, serving, lenient, with_lifted)
        finally:
            module.load_state_dict(kept)

    def serve(module: Any, step: str, serving: list[Pair], lenient: bool,
              with_lifted: bool) -> list[Pair]:
        served = []
        for p in serving:
            values = lifted_values(p) if with_lifted else {}
            module.load_state_dict(p.seen.module.state_dict())
            failure = None
            for j, recorded in enumerate(p.seen.calls):
                where = p.seen.label(many_configs, j)
                try:
                    got = call(module, recorded.args, recorded.kwargs, values)
                except BaseException as exc:
                    failure = (f"{step}: raised for {where} with {values}: "
                               f"{short_error(exc, rename)}")
                    break
                found = difference(recorded.output, got)
                if found:
                    failure = f"{step}: {found} for {where} called with {values}"
                    break
            if failure is None:
                served.append(p)
            elif lenient and id(p) in excusable:
                notes.add("also differing in a setting that is not lifted",
                          f"{p.seen.label(many_configs)}: {excusable[id(p)]}")
            else:
                raise rejected(failure)
        return served

    # One artifact, eagerly: a copy of the first rewritten instance, given each instance's
    # weights and lifted settings, reproduces it (decided even when the class does not script).
    eager_checked = True
    try:
        eager_copy = copy.deepcopy(first.new)
    except BaseException:
        eager_checked = False
        served = candidates
        eager_note = "one artifact not checked eagerly (the instance cannot be copied)"
    else:
        served = check_artifact(eager_copy, "one artifact (eager)", candidates, True)
        eager_note = f"one artifact holds in eager mode for {len(served)} of {len(called)}"

    if target == "export":
        from tsfix.codemods.validation.export import check_reached

        exported = check_reached(first, served, called, lifted_values, rename,
                                 lambda p, j: p.seen.label(many_configs, j))
        summary = (f"from model {model_label}: {len(called)} instance(s) on their real "
                   f"inputs: eager parity, {eager_note}, {exported}"
                   f"{reached_at_other_batch(called, EXPORT_OTHER_BATCH)}")
        if notes:
            summary += f" (not comparable: {notes})"
        return summary

    # Re-script: every called instance's outputs from a scripted module. Instances alike in
    # weight shapes and settings share one scripted instance given their weights (TorchScript
    # compiles one type for them); one it does not reproduce is scripted itself.
    scripted: dict[int, Any] = {}
    alike: dict[str, Any] = {}
    for p in [first, *(q for q in called if q is not first)]:
        signature = _signature(p)
        shared = alike.get(signature)
        if shared is not None and _reproduces(shared, p, rename):
            continue
        try:
            artifact = script(p.new)
        except BaseException as exc:
            raise not_scripting(exc, p.seen.module, rename, eager_note,
                                f" (inputs from model {model_label})") from exc
        for j, recorded in enumerate(p.seen.calls):
            where = p.seen.label(many_configs, j)
            try:
                got = call(artifact, recorded.args, recorded.kwargs)
            except BaseException as exc:
                raise rejected(f"re-script: the scripted {where} raised: "
                               f"{short_error(exc, rename)}") from exc
            found = difference(recorded.output, got)
            if found:
                raise rejected(f"re-script: {found} for {where}")
        scripted[id(p)] = artifact
        alike.setdefault(signature, artifact)

    # One artifact, scripted: the first instance's scripted module serves them too.
    artifact = scripted[id(first)]
    served = check_artifact(artifact, "one artifact", served, not eager_checked)

    loaded, save_step = save_load_step(artifact, model_class.python_only, dict(rename),
                                       first.seen.module)
    if loaded is not None:
        # Without an instance the artifact serves (every one a subclass with a forward of its
        # own), the first instance checks the loaded copy of itself.
        check_artifact(loaded, "save/load", served or [first], False, bool(served))

    summary = (f"from model {model_label}: {len(called)} instance(s) on their real inputs: "
               f"eager parity, re-script, one artifact served {len(served)} of {len(called)}, "
               f"{save_step}{reached_at_other_batch(called, 'eager parity, re-script')}")
    if never:
        summary += (f"; {len(never)} other instance(s) never called "
                    f"({', '.join(p.seen.label(many_configs) for p in never[:3])})")
    if notes:
        summary += f" (not comparable: {notes})"
    return summary


def reached_at_other_batch(called: list[Pair], steps: str) -> str:
    """The verified reason's words for the calls recorded in the model's run at the second
    batch size (checked with the others)."""
    sizes = sorted({c.batch for p in called for c in p.seen.calls if c.batch is not None})
    if not sizes:
        return ""
    count = sum(c.batch is not None for p in called for c in p.seen.calls)
    return (f"; at batch size {', '.join(map(str, sizes))} too: {steps} ({count} call(s) from "
            "the model's run at that size)")


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


def _reproduces(shared: Any, p: Pair, rename: Mapping[str, str]) -> bool:
    """``shared`` (a scripted instance alike ``p``), given ``p``'s weights, gives ``p``'s
    recorded outputs; its own weights are put back."""
    kept = {key: value.detach().clone() for key, value in shared.state_dict().items()}
    try:
        shared.load_state_dict(p.seen.module.state_dict())
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
    attributes (worker.plain_settings), tuples of them (a convolution's dilation), the class
    of every submodule, and plain functions held as attributes."""
    found = plain_settings(module, skip)
    for prefix, sub in module.named_modules():
        found[f"{prefix}.<class>"] = type(sub).__qualname__
        for key, value in vars(sub).items():
            name = f"{prefix}.{key}" if prefix else key
            if key.startswith("_") or name in skip:
                continue
            if (isinstance(value, tuple) and len(value) <= 16
                    and all(isinstance(v, bool | int | float | str) for v in value)):
                found[name] = value
            elif isinstance(value, types.FunctionType | types.BuiltinFunctionType):
                found[name] = getattr(value, "__qualname__", repr(value))
    return found


def _forward_owner(cls: type, rename: Mapping[str, str]) -> tuple[str, str] | None:
    """The class that defines the ``forward`` instances of ``cls`` run."""
    owner = next((c for c in cls.__mro__ if "forward" in vars(c)), None)
    return class_origin(owner, rename) if owner is not None else None


def module_at(modules: Mapping[str, types.ModuleType], path: str, rename: Mapping[str, str]
              ) -> types.ModuleType | None:
    """The module of ``modules`` loaded from ``path`` (or from its overlay copy)."""
    wanted = str(Path(path).resolve())
    for module in modules.values():
        file = module_file(module)
        if file is not None and str(Path(rename.get(file, file)).resolve()) == wanted:
            return module
    return None


def _shapes(module: torch.nn.Module) -> dict[str, Any]:
    return {key: value.shape for key, value in module.state_dict().items()}


# ---- the model verdict -------------------------------------------------------------------------

def model_verdict(original: Original, models: list[torch.nn.Module],
                  rename: Mapping[str, str], tree: Tree, texts: Texts,
                  target: str = "torchscript",
                  outputs: Sequence[Sequence[Any]] | None = None) -> ModelVerdict:
    """The rewritten model against the ORIGINAL eager outputs: eager parity, script, the
    scripted outputs, save/load. Under the target ``export``, torch.export replaces
    TorchScript: "scripts" then means every configuration exports and its programs (and
    their saved and loaded copies) reproduce the original's eager outputs. ``outputs``: the
    rewritten model's eager outputs when they were computed already (:func:`eager_run`)."""
    configs = original.configs
    rename = dict(rename)
    for k, (inst, model) in enumerate(zip(configs, models, strict=True)):
        for j, (args, kwargs) in enumerate(inst.calls):
            try:
                got = outputs[k][j] if outputs is not None else call(model, args, kwargs)
            except BaseException as exc:
                return ModelVerdict("fails", f"eager parity: the rewritten model raised "
                                                 f"for {inst.label(j)}: "
                                                 f"{short_error(exc, rename)}")
            found = difference(original.outputs[k][j], got)
            if found:
                return ModelVerdict("fails", f"eager parity: {found} for {inst.label(j)}")
    failed = model_at_other_batch(original, models, "eager parity", "the rewritten model",
                                  rename)
    if failed is not None:
        return failed
    if target == "export":
        from tsfix.codemods.validation.export import check_model

        checked = check_model(configs, models, original.outputs, rename)
        if checked.ok:
            return ModelVerdict("scripts", checked.reason + other_batch_note(
                original.batches, EXPORT_OTHER_BATCH))
        blocker = (export_blocker(checked.failure, rename, tree, texts)
                   if checked.failure is not None else None)
        return ModelVerdict("fails", checked.reason, blocker=blocker)
    python_only = False
    for k, (inst, model) in enumerate(zip(configs, models, strict=True)):
        try:
            artifact = script(model)
        except BaseException as exc:
            return ModelVerdict("fails", script_message(exc, rename),
                                blocker=blocker_of(exc, rename, tree, texts))
        checks: list[tuple[str, Any]] = [("script", artifact)]
        buffer = io.BytesIO()
        try:
            torch.jit.save(artifact, buffer)
            buffer.seek(0)
            checks.append(("save/load", torch.jit.load(buffer)))  # type: ignore[no-untyped-call]
        except BaseException as exc:
            if _PYTHON_CALL_SAVE not in str(exc):
                return ModelVerdict("fails", f"save/load: {short_error(exc, rename)}")
            python_only = True
        for step, module in checks:
            for j, (args, kwargs) in enumerate(inst.calls):
                try:
                    got = call(module, args, kwargs)
                except BaseException as exc:
                    return ModelVerdict("fails", f"{step}: the scripted model raised for "
                                                     f"{inst.label(j)}: "
                                                     f"{short_error(exc, rename)}")
                found = difference(original.outputs[k][j], got)
                if found:
                    return ModelVerdict("fails", f"{step}: {found} for {inst.label(j)} "
                                                     "(against the original's eager output)")
            failed = model_at_other_batch(original, {k: module}, step, "the scripted model",
                                          rename)
            if failed is not None:
                return failed
    save = (f"save fails as expected ({PYTHON_ONLY_SAVE})" if python_only else "save/load")
    steps = "eager parity, script" if python_only else "eager parity, script, save/load"
    return ModelVerdict("scripts", f"{len(configs)} configuration(s): eager parity, script, "
                                       f"parity with the original, {save}"
                                       f"{other_batch_note(original.batches, steps)}",
                        python_only=python_only)


def model_at_other_batch(original: Original,
                         modules: Sequence[Any] | Mapping[int, Any], step: str,
                         subject: str, rename: Mapping[str, str]) -> ModelVerdict | None:
    """A failing verdict when a module (per configuration: a sequence, or a mapping from
    configuration indexes) does not reproduce the original's output at the second batch
    size; None when it does or the size does not apply."""
    chosen = modules.items() if isinstance(modules, Mapping) else enumerate(modules)
    for k, module in chosen:
        batch = original.batches[k] if k < len(original.batches) else None
        try:
            at_other_batch(module, batch, step, subject, original.configs[k].label(0),
                           dict(rename))
        except Verdict as outcome:
            return ModelVerdict("fails", outcome.reason)
    return None


