"""How many ParityBench test cases TorchScript compiles with parity, before and after tsfix.

    nice -n 19 python benchmarks/paritybench.py 30                    # 30 files, seed 0
    python benchmarks/paritybench.py 30 --seed 1 --json pb.json
    python benchmarks/paritybench.py 30 --no-verify                   # the rewrite alone
    python benchmarks/paritybench.py 2 --source tests/data/paritybench # a folder of such files

ParityBench (github.com/jansel/pytorch-jit-paritybench) is nn.Module code crawled from GitHub,
one ``generated/test_<repo>.py`` per project, each ending with
``TESTCASES = [(Class, lambda: (init_args, init_kwargs), lambda: (args, kwargs), compiles), ...]``.
The files are read from a bare git snapshot (``--mirror``, read with ``git show``) or from a
folder (``--source``). A seeded random sample of N of them is copied twice into a work folder:
``original/`` (never changed) and ``rewritten/`` (what ``tsfix apply`` rewrites), each with a
small ``_paritybench_helpers.py`` of our own (the real one needs dynamo, inductor and the
ParityBench package), stand-ins for third-party modules this environment lacks (torchvision,
tensorflow, ...: an import of them gives ``MagicMock`` modules, so a file that only imports
them loads, and a case that really uses them fails eagerly and is excluded) and
``_pb_examples.py``, which evaluates a test case's two lambdas from the file's ast with a fixed
torch seed. The same function gives the harness and tsfix's validation the same inputs.

Per file, in a child process with a time limit (a hang or a crash fails that file's remaining
cases, never the run):

1. **before** (``original/``): each case's class is built (seed 0) and run eagerly twice, in
   eval mode, with the seed reset before each call. A case that fails eagerly, or whose two
   runs differ, is excluded. The output and the ``state_dict`` are saved. Then
   ``torch.jit.script`` of the instance, run on the same inputs: it *passes* when its output
   equals the eager output (``torch.testing.assert_close`` tolerances, nested
   tuples/lists/dicts, ``None``, numbers).
2. The example tables tsfix reads are written to ``rewritten/pyproject.toml``: one
   ``[tool.tsfix.examples."<file>:<Class>"]`` per class with a case that ran eagerly,
   ``factory = "_pb_factories:<name>"``, which returns ``[(init_kwargs, args, kwargs)]``.
   Positional init args are bound to the constructor's parameter names
   (``inspect.signature(Class).bind``); a case whose positional args land in ``*args`` cannot
   be written as keywords and gets no table (still measured before and after).
3. ``tsfix apply --rule all`` (validation and default options, a fresh cache folder) on the
   sampled files of ``rewritten/``, with ``--report``; its wall time and peak memory (the sum
   of the resident sets of tsfix and its workers, sampled every 0.2 s) are recorded.
4. **after** (``rewritten/``): the rewritten class is built with the same seed and given the
   original's ``state_dict``, run eagerly once (as in step 1: a forward may create
   attributes), scripted and run; it *passes* when its output equals the ORIGINAL eager
   output saved in step 1.

The report: pass rate before and after, new passes, regressions (listed), the class-rewrite
verdicts of tsfix's JSON report (verified / rejected / unverified by reason), what still fails
to script after and before grouped by cause (TorchScript's error text, see ``CAUSES``), the most
common messages per cause with one example each, and the time and memory of the tsfix run.
``--json FILE`` writes all of it, case by case.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MIRROR = Path("/work/.mirror/jansel+pytorch-jit-paritybench/repo")
CLI = "import sys; from tsfix.cli.main import main; main(sys.argv[1:])"
SEED = 0

# What happened to one case in one phase.
PASS = "pass"                     # scripts, and the scripted output equals the eager one
SCRIPT_FAILS = "script fails"     # torch.jit.script raised
RUN_FAILS = "scripted run fails"  # scripted, but calling it raised
MISMATCH = "mismatch"             # scripted and ran, other output
TIMEOUT = "timeout"
CRASH = "crash"                   # the child process died
NOT_LOADED = "does not load"      # the (rewritten) file or class could not be loaded or built
EAGER_FAILS = "eager fails"       # excluded: the original does not run eagerly
NONDETERMINISTIC = "nondeterministic"  # excluded: two eager runs differ
EXCLUDED = (EAGER_FAILS, NONDETERMINISTIC)

# Why a case does not script, from TorchScript's message; the first pattern that matches wins.
# The groups are those of issue 18's ParityBench measurement.
CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.S)) for name, pattern in (
    # Not the model's code: torch's weight_norm hook object, a Tensor method TorchScript lacks.
    ("other", r"'WeightNorm' object|'Tensor' object has no attribute or method"),
    ("numpy", r"numpy|\bnp\.\w+|ndarray"),
    ("super()", r"super\(\)|<class 'super'>|\bsuper\b"),
    ("ModuleList index", r"Expected integer literal for index|ModuleList|ModuleDict"
                         r"|[Cc]an not iterate over a module list"
                         r"|Sequential\b.*index|Unable to extract string literal index"
                         r"|Index for .* must be"),
    ("config or Python-object attributes",
     r"has no attribute|nonexistent attribute|Could not cast attribute|Python builtin <"
     r"|is currently not supported in Torchscript|Unknown builtin op|object is not callable"
     r"|Cannot instantiate class|Python value of type|Could not infer type of list element"
     r"|failed to convert Python type|attribute lookup is not defined|Unknown type constructor"
     r"|is not a module|module '.*' has no|__torch_function__|cannot call a value of type"
     r"|object has no attribute|Module '.*' has no|Tried to set nonexistent attribute"),
    ("syntax", r"variable number of arguments|keyword-only|augmented assignment|not supported"
               r"|aren't supported|are not supported|don't support|unsupported|Unsupported"
               r"|Comprehension|comprehension|[Ll]ambda|Starred|Function definitions"
               r"|try blocks|with statement|del statement|global variables|nonlocal"
               r"|can't be used|Dict comprehension|Tuple slicing|slice indices must be"
               r"|Expected a single top-level function|Compiled functions can't"),
    ("types and annotations", r"[Ee]xpected a value of type|Arguments for call are not valid"
                              r"|previously had type|[Ee]xpected a default value of type"
                              r"|annotated|[Uu]nknown type|[Ee]xpected type|type mismatch"
                              r"|is not defined in the (?:false|true) branch|Could not infer"
                              r"|Optional|NoneType|inferred|types|Type|type"
                              r"|Argument .* not provided|is undefined|used before"),
    ("other", r""),
))
CAUSE_NAMES = tuple(dict.fromkeys(name for name, _ in CAUSES))


def cause_of(message: str) -> str:
    for name, pattern in CAUSES:
        if pattern.search(message):
            return name
    return "other"


def first_lines(message: str) -> str:
    """TorchScript's message without its source excerpt: the lines before the first
    ``File "...", line N`` / ``~~~`` block, squeezed to one line."""
    kept: list[str] = []
    for line in message.splitlines():
        if re.match(r"\s*(File \"|~|\^|def |'.*' is being compiled since)", line):
            break
        if line.strip():
            kept.append(line.strip())
    text = " ".join(kept) or message.strip().splitlines()[0] if message.strip() else ""
    return text[:300]


def where(message: str) -> str:
    """``file:line: code`` of the line TorchScript points at (the one above ``<--- HERE``)."""
    lines = message.splitlines()
    site = ""
    for i, line in enumerate(lines):
        found = re.match(r'\s*File "([^"]+)", line (\d+)', line)
        if found:
            site = f"{Path(found.group(1)).name}:{found.group(2)}"
        if "<--- HERE" in line and i:
            return f"{site}: {lines[i - 1].strip()}"[:200]
    return site


def message_kind(message: str) -> str:
    """A headline without its particulars, so that alike messages count together."""
    kind = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "'...'", first_lines(message))
    kind = re.sub(r"\b\d+\b", "N", kind)
    return kind[:140]


# ---- the files -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    file: str            # test_<project>.py
    index: int           # position in TESTCASES
    cls: str
    jit_compiles: bool   # ParityBench's own flag, for reference

    @property
    def key(self) -> str:
        return f"{self.file}:{self.index}:{self.cls}"


def testcases(source: str) -> list[tuple[str, ast.Lambda, ast.Lambda, bool]]:
    """(class name, init lambda, forward lambda, jit_compiles) of each TESTCASES entry."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[tuple[str, ast.Lambda, ast.Lambda, bool]] = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "TESTCASES"
                and isinstance(node.value, (ast.List, ast.Tuple))):
            continue
        for entry in node.value.elts:
            if not (isinstance(entry, ast.Tuple) and len(entry.elts) >= 3
                    and isinstance(entry.elts[0], ast.Name)
                    and isinstance(entry.elts[1], ast.Lambda)
                    and isinstance(entry.elts[2], ast.Lambda)):
                continue
            compiles = (len(entry.elts) > 3 and isinstance(entry.elts[3], ast.Constant)
                        and bool(entry.elts[3].value))
            found.append((entry.elts[0].id, entry.elts[1], entry.elts[2], compiles))
    return found


def all_files(source: Path | None, mirror: Path) -> list[str]:
    if source is not None:
        return sorted(p.name for p in source.glob("test_*.py"))
    out = subprocess.run(["git", "-C", str(mirror), "ls-tree", "--name-only", "HEAD",
                          "generated/"], capture_output=True, text=True, check=True).stdout
    return sorted(Path(line).name for line in out.split() if Path(line).name.startswith("test_"))


def read_file(name: str, source: Path | None, mirror: Path) -> str:
    if source is not None:
        return (source / name).read_text(encoding="utf-8")
    return subprocess.run(["git", "-C", str(mirror), "show", f"HEAD:generated/{name}"],
                          capture_output=True, text=True, check=True).stdout


def sample(names: Sequence[str], n: int, seed: int) -> list[str]:
    return sorted(random.Random(seed).sample(list(names), min(n, len(names))))


# ---- what goes next to the files -----------------------------------------------------------------

# Our own _paritybench_helpers: the names generated files import, without dynamo/inductor and
# the ParityBench package. It also installs the stand-ins for absent third-party modules, since
# every generated file imports it before its other imports.
HELPERS = '''\
"""ParityBench's helper names, for tsfix's measurement (benchmarks/paritybench.py)."""
import importlib.abc
import importlib.machinery
import importlib.util
import re
import sys
import unittest
from functools import lru_cache
from unittest.mock import MagicMock

import torch

STUBBED = set(%(stubbed)r)


class _StubModule(MagicMock):
    """An absent third-party module: every attribute is a MagicMock."""


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    pb_stub = True

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(name=spec.name)
        module.__name__ = spec.name
        module.__path__ = []
        module.__spec__ = spec
        module.__file__ = None
        module.__version__ = "99.0.0"   # version checks (torch.utils.tensorboard's) pass
        return module

    def exec_module(self, module):
        pass


if not any(getattr(finder, "pb_stub", False) for finder in sys.meta_path):
    sys.meta_path.append(_StubFinder())


class DummyBlock(torch.nn.ReLU):
    expansion = 1

    def __str__(self):
        return "_mock_layer()"

    __repr__ = __str__


@lru_cache(None)
def patch_functional():
    f1 = torch.functional
    f2 = torch.nn.functional
    names1 = {name for name in dir(f1) if re.match(r"^[a-z]", name)}
    names2 = {name for name in dir(f2) if re.match(r"^[a-z]", name)}
    for name in names1 - names2:
        setattr(f2, name, getattr(f1, name))
    for name in names2 - names1:
        setattr(f1, name, getattr(f2, name))


def _mock_layer(in_features=None, out_features=None, *args, **kwargs):
    if in_features and out_features:
        return torch.nn.Linear(in_features, out_features, **kwargs)
    return DummyBlock()


class _mock_config(dict):
    # ParityBench's is `__getattr__ = dict.__getitem__`; dunder lookups (copy.deepcopy's
    # `__deepcopy__`) raise AttributeError here, as Python's protocols expect, so the config
    # survives the deep copy tsfix makes of init values. Model code sees the same behaviour.
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self[name]


def _fails_compile():
    return unittest.skip("jit compile fails")


class _paritybench_base(unittest.TestCase):
    pass
'''

# Evaluates a test case's lambdas from the file's ast, with a fixed seed, in the namespace of
# the file imported under a private name (so module-level names such as MSELoss resolve).
EXAMPLES = '''\
"""Test-case inputs of ParityBench files, for tsfix's measurement (benchmarks/paritybench.py)."""
import ast
import builtins
import importlib.util
import inspect
import sys
from pathlib import Path

import torch

SEED = %(seed)d
HERE = Path(__file__).resolve().parent
_namespaces = {}
# A file's test cases, parsed once per file and version: a factory is called for every model job
# and configuration, and a ParityBench file runs to thousands of lines (parsing it on each call
# was 14%% of a 30-file tsfix run's CPU time). tsfix forgets the tree's modules after each job,
# this one included, so the parses are kept where a validation worker keeps them: on builtins.
_parsed = vars(builtins).setdefault("_tsfix_paritybench_parsed", {})


def _cases(path):
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _parsed:
        _parsed[key] = _entries(ast.parse(path.read_text(encoding="utf-8")))
    return _parsed[key]


def _entries(tree):
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "TESTCASES"):
            return [entry.elts for entry in node.value.elts
                    if isinstance(entry, ast.Tuple) and len(entry.elts) >= 3
                    and isinstance(entry.elts[0], ast.Name)
                    and isinstance(entry.elts[1], ast.Lambda)
                    and isinstance(entry.elts[2], ast.Lambda)]
    return []


def namespace(file):
    if file not in _namespaces:
        name = "_pb_ns_" + Path(file).stem
        spec = importlib.util.spec_from_file_location(name, HERE / file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _namespaces[file] = module
    return _namespaces[file]


def evaluate(lam, module):
    torch.manual_seed(SEED)
    expression = ast.fix_missing_locations(ast.Expression(lam.body))
    args, kwargs = eval(compile(expression, "<TESTCASES>", "eval"), vars(module))
    return list(args), dict(kwargs)


def case(file, index, module=None):
    """(class name, init args, init kwargs, forward args, forward kwargs) of one case."""
    module = module or namespace(file)
    entry = _cases(HERE / file)[index]
    init_args, init_kwargs = evaluate(entry[1], module)
    args, kwargs = evaluate(entry[2], module)
    return entry[0].id, init_args, init_kwargs, args, kwargs


def as_keywords(cls, init_args, init_kwargs):
    """The constructor's arguments as keywords, or None when a positional one has no name."""
    if not init_args:
        return dict(init_kwargs)
    bound = inspect.signature(cls).bind(*init_args, **init_kwargs)
    for name, param in inspect.signature(cls).parameters.items():
        if param.kind is param.VAR_POSITIONAL and name in bound.arguments:
            return None
    keywords = {}
    for name, value in bound.arguments.items():
        kind = inspect.signature(cls).parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            keywords.update(value)
        else:
            keywords[name] = value
    return keywords


def examples(file, indexes):
    """tsfix's factory format, [(init_kwargs, args, kwargs)], for the cases ``indexes``."""
    module = namespace(file)
    out = []
    for index in indexes:
        cls_name, init_args, init_kwargs, args, kwargs = case(file, index, module)
        keywords = as_keywords(getattr(module, cls_name), init_args, init_kwargs)
        if keywords is not None:
            out.append((keywords, tuple(args), kwargs))
    return out
'''


def top_level_imports(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


# Imported by modules the files import (``torch.utils.tensorboard`` imports ``tensorboard``).
INDIRECT_IMPORTS = ("tensorboard", "tensorboardX", "PIL", "cv2")


def absent_modules(names: Iterable[str], local: set[str]) -> list[str]:
    """Top-level modules the files import that neither this Python nor the tree provides."""
    import importlib.util

    absent = []
    wanted = set(names) | set(INDIRECT_IMPORTS)
    for name in sorted(wanted - local - {"_paritybench_helpers", "__future__"}):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            absent.append(name)
    return absent


def make_tree(folder: Path, texts: dict[str, str], stubbed: Sequence[str]) -> None:
    folder.mkdir(parents=True)
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "_paritybench_helpers.py").write_text(HELPERS % {"stubbed": sorted(stubbed)},
                                                    encoding="utf-8")
    (folder / "_pb_examples.py").write_text(EXAMPLES % {"seed": SEED}, encoding="utf-8")


def write_tables(folder: Path, tables: dict[str, dict[str, list[int]]]) -> int:
    """``pyproject.toml`` with one example table per class (``file -> class -> case indexes``)
    and ``_pb_factories.py`` with one factory per table; returns the number of tables."""
    lines = ["[tool.tsfix]", ""]
    functions = ['"""Example factories for tsfix (benchmarks/paritybench.py)."""',
                 "from _pb_examples import examples", ""]
    count = 0
    for file, classes in sorted(tables.items()):
        for cls, indexes in sorted(classes.items()):
            function = f"f{count}_{Path(file).stem}_{cls}"
            functions += ["", f"def {function}():",
                          f"    return examples({file!r}, {sorted(indexes)!r})", ""]
            lines += [f"[tool.tsfix.examples.{json.dumps(f'{file}:{cls}')}]",
                      f"factory = {json.dumps(f'_pb_factories:{function}')}", ""]
            count += 1
    (folder / "pyproject.toml").write_text("\n".join(lines), encoding="utf-8")
    (folder / "_pb_factories.py").write_text("\n".join(functions), encoding="utf-8")
    return count


# ---- the child: one file, one phase --------------------------------------------------------------

def same(actual: Any, expected: Any) -> str | None:
    """None when equal (torch.testing tolerances), else why not."""
    import torch

    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"expected a Tensor, got {type(actual).__name__}"
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except AssertionError as error:
            return first_lines(str(error))
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            return f"expected a sequence of {len(expected)}, got {type(actual).__name__}"
        for a, e in zip(actual, expected, strict=True):
            why = same(a, e)
            if why:
                return why
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            return "dict keys differ"
        for key in expected:
            why = same(actual[key], expected[key])
            if why:
                return why
        return None
    if type(expected).__name__ == "ndarray":
        import numpy

        try:
            equal = (isinstance(actual, numpy.ndarray) and actual.shape == expected.shape
                     and bool(numpy.all(actual == expected)))
        except Exception as error:
            return f"cannot compare arrays: {error}"
        return None if equal else "arrays differ"
    if isinstance(expected, float) and isinstance(actual, (int, float)):
        return None if abs(actual - expected) <= 1e-5 + 1.3e-6 * abs(expected) else (
            f"{actual} != {expected}")
    try:
        equal = bool(actual == expected)
    except Exception as error:
        return f"cannot compare {type(expected).__name__} values: {error}"
    return None if equal else f"{actual!r} != {expected!r}"[:300]


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:12000]


def child(phase: str, tree: Path, file: str, refs: Path, indexes: Sequence[int]) -> None:
    """Run the cases ``indexes`` of ``tree/file``; one JSON line per case on stdout."""
    import importlib.util
    import warnings

    import torch

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    sys.path.insert(0, str(tree))
    os.chdir(tree)

    def emit(index: int, status: str, message: str = "", stage: str = "") -> None:
        print(json.dumps({"index": index, "status": status, "message": message,
                          "stage": stage}), flush=True)

    name = Path(file).stem
    try:
        spec = importlib.util.spec_from_file_location(name, tree / file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except BaseException as error:
        for index in indexes:
            emit(index, EAGER_FAILS if phase == "before" else NOT_LOADED, _error(error), "import")
        return

    for index in indexes:
        try:
            emit(index, *run_case(phase, module, file, index, refs / f"{name}.{index}.pt"))
        except Exception as error:
            # The harness's own comparison or saving failed on an odd output: that case only.
            emit(index, EAGER_FAILS if phase == "before" else CRASH,
                 f"harness: {_error(error)}", "harness")


def run_case(phase: str, module: Any, file: str, index: int,
             ref_path: Path) -> tuple[str, str, str]:
    """(status, message, stage) of one case in one phase."""
    import _pb_examples  # type: ignore[import-not-found]  # written next to the files
    import torch

    def call(model: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        torch.manual_seed(SEED)
        with torch.no_grad():
            return model(*clone(args), **clone(kwargs))

    not_built = EAGER_FAILS if phase == "before" else NOT_LOADED
    try:
        cls_name, init_args, init_kwargs, args, kwargs = _pb_examples.case(file, index, module)
        torch.manual_seed(SEED)
        model = getattr(module, cls_name)(*init_args, **init_kwargs)
        model.eval()
    except BaseException as error:
        return not_built, _error(error), "build"
    if phase == "before":
        try:
            first = call(model, args, kwargs)
            second = call(model, args, kwargs)
        except BaseException as error:
            return EAGER_FAILS, _error(error), "eager"
        if stand_in(first) or any(stand_in(list(vars(m).values())) for m in model.modules()):
            return EAGER_FAILS, "uses a stand-in for an absent module", "eager"
        differs = same(second, first)
        if differs is not None:
            return NONDETERMINISTIC, differs, "eager"
        try:
            torch.save({"output": first, "state": model.state_dict()}, ref_path)
        except BaseException as error:
            return EAGER_FAILS, f"output cannot be saved: {_error(error)}", "eager"
        expected = first
    else:
        if not ref_path.is_file():
            return NOT_LOADED, "no eager output was recorded before", "build"
        saved = torch.load(ref_path, weights_only=False)
        expected = saved["output"]
        # When names changed, the seed built the same weights.
        with contextlib.suppress(BaseException):
            model.load_state_dict(saved["state"])
        # Run once eagerly, as before does: a forward that sets `self.x = ...` creates the
        # attribute TorchScript then finds; scripted without that run, the same unchanged class
        # fails "Tried to set nonexistent attribute" (seed 12: two false regressions).
        with contextlib.suppress(BaseException):
            call(model, args, kwargs)
    try:
        scripted = torch.jit.script(model)
    except BaseException as error:
        forget_half_compiled_types(torch)
        return SCRIPT_FAILS, _error(error), "script"
    try:
        actual = call(scripted, args, kwargs)
    except BaseException as error:
        return RUN_FAILS, _error(error), "run"
    why = same(actual, expected)
    return (PASS, "", "compare") if why is None else (MISMATCH, why, "compare")


def stand_in(value: Any) -> bool:
    """Whether an output holds a MagicMock of a stand-in module (so it computed nothing)."""
    from unittest.mock import NonCallableMock

    if isinstance(value, NonCallableMock):
        return True
    if isinstance(value, (list, tuple)):
        return any(stand_in(v) for v in value)
    if isinstance(value, dict):
        return any(stand_in(v) for v in value.values())
    if type(value).__name__ == "ndarray" and value.dtype == object:
        return any(stand_in(v) for v in value.flat)
    return False


def forget_half_compiled_types(torch: Any) -> None:
    """After a failed ``torch.jit.script``, TorchScript keeps the class's type with its
    methods registered but not compiled, and the next case of the same class (or a class that
    holds it) would fail with "Can't redefine method: forward" instead of its own error. The
    same repair as tsfix's validation worker (``script``): forget types that did not finish."""
    with contextlib.suppress(Exception):
        store = torch.jit._recursive.concrete_type_store
        for known in store.type_store.values():
            known[:] = [t for t in known if t in store.methods_compiled]


def clone(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list):
        return [clone(v) for v in value]
    if isinstance(value, tuple):
        return tuple(clone(v) for v in value)
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    return value


# ---- the parent ----------------------------------------------------------------------------------

@dataclass
class Outcome:
    status: str
    message: str = ""
    stage: str = ""


def run_phase(phase: str, tree: Path, refs: Path, cases: dict[str, list[Case]],
              timeout: float, log: Any) -> dict[str, Outcome]:
    """Every file's cases in a child process each; a case the child did not report is a
    timeout (the child was killed) or a crash (it died)."""
    results: dict[str, Outcome] = {}
    for number, (file, file_cases) in enumerate(sorted(cases.items()), 1):
        indexes = [c.index for c in file_cases]
        if not indexes:
            continue
        command = [sys.executable, __file__, "_child", phase, str(tree), file, str(refs),
                   ",".join(map(str, indexes))]
        started = time.monotonic()
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        died = ""
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            if process.returncode:
                died = (f"exit {process.returncode}" if process.returncode > 0 else
                        f"signal {signal.Signals(-process.returncode).name}")
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            died = TIMEOUT
        reported: dict[int, Outcome] = {}
        for line in stdout.splitlines():
            if line.startswith("{"):
                data = json.loads(line)
                reported[data["index"]] = Outcome(data["status"], data["message"], data["stage"])
        for case in file_cases:
            outcome = reported.get(case.index)
            if outcome is None:
                status = TIMEOUT if died == TIMEOUT else CRASH
                tail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
                outcome = Outcome(status, f"{died or 'no result'} {' '.join(tail)}"[:500],
                                  "child")
            results[case.key] = outcome
        print(f"  [{phase}] {number}/{len(cases)} {file}: {len(file_cases)} cases, "
              f"{time.monotonic() - started:.1f}s{', ' + died if died else ''}",
              file=log, flush=True)
    return results


def tree_rss_kb(root: int) -> int:
    """Resident memory of ``root`` and all its descendants, in kB (from /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        rss[int(entry)] = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    members = {root}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in members and pid not in members:
                members.add(pid)
                grew = True
    return sum(rss.get(pid, 0) for pid in members)


@dataclass
class TsfixRun:
    seconds: float
    peak_mb: float
    exit_code: int
    stderr_lines: int
    report: dict[str, Any] = field(default_factory=dict)


def run_tsfix(tree: Path, files: Sequence[str], verify: bool, unsafe_fixes: bool,
              log: Any) -> TsfixRun:
    report = tree.parent / "tsfix-report.json"
    command = [sys.executable, "-c", CLI, "apply", "--rule", "all", "--report", str(report)]
    if not verify:
        command.append("--no-verify")
    if unsafe_fixes:
        command.append("--unsafe-fixes")
    command += sorted(files)
    env = {**os.environ, "TSFIX_CACHE_DIR": str(tree.parent / "tsfix-cache")}
    stderr_path = tree.parent / "tsfix-stderr.txt"
    peak = 0
    started = time.monotonic()
    with open(stderr_path, "w") as stderr_file:
        process = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                                   stderr=stderr_file)
        while process.poll() is None:
            peak = max(peak, tree_rss_kb(process.pid))
            time.sleep(0.2)
    seconds = time.monotonic() - started
    lines = stderr_path.read_text(errors="replace").splitlines()
    print(f"  tsfix: exit {process.returncode}, {seconds:.0f}s, peak {peak / 1024:.0f} MB, "
          f"{len(lines)} stderr lines ({stderr_path})", file=log, flush=True)
    data = json.loads(report.read_text()) if report.is_file() else {}
    return TsfixRun(seconds, peak / 1024, process.returncode, len(lines), data)


def verdicts(report: dict[str, Any]) -> dict[str, Any]:
    """Class-rewrite verdicts of tsfix's report; unverified and rejected ones by reason."""
    from tsfix.codemods.pipeline.report import reason_kind

    counts: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    reasons: dict[str, Counter[str]] = {"unverified": Counter(), "rejected": Counter()}
    for file in report.get("files", []):
        for record in file.get("classes", []):
            counts[record["verdict"]] += 1
            rules[record["rule"]] += 1
            if record["verdict"] in reasons:
                reason = record.get("reason", "")
                short = (reason.split(": ", 1)[0] if record["verdict"] == "unverified"
                         else reason_kind(reason, 80))
                reasons[record["verdict"]][short] += 1
    failed = [f"{f['path']}: {f.get('error')}" for f in report.get("files", [])
              if f.get("status") == "failed"]
    models = Counter(m.get("status", "?") for m in report.get("models", []))
    return {"classes": sum(counts.values()), "verdicts": dict(counts), "rules": dict(rules),
            "unverified_by_reason": dict(reasons["unverified"].most_common()),
            "rejected_by_reason": dict(reasons["rejected"].most_common()),
            "failed_files": failed, "models": dict(models)}


def git_commit() -> str:
    """The commit of the tsfix that runs (found through its package, so a copy of this script
    run from elsewhere still names it), and whether its source has uncommitted changes."""
    import tsfix.codemods

    here = Path(tsfix.codemods.__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--",
                                "codemods", "cli"], capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + (" (+ uncommitted changes in codemods/cli)" if dirty.strip() else "")


def summarise(cases: list[Case], before: dict[str, Outcome],
              after: dict[str, Outcome]) -> dict[str, Any]:
    measured = [c for c in cases if before[c.key].status not in EXCLUDED]
    passed_before = {c.key for c in measured if before[c.key].status == PASS}
    passed_after = {c.key for c in measured if after.get(c.key, Outcome(CRASH)).status == PASS}
    causes: dict[str, dict[str, Any]] = {}
    for label, results, keys in (("before", before, passed_before),
                                 ("after", after, passed_after)):
        groups: Counter[str] = Counter()
        kinds: dict[str, Counter[str]] = defaultdict(Counter)
        examples: dict[str, str] = {}
        for case in measured:
            if case.key in keys:
                continue
            outcome = results.get(case.key, Outcome(CRASH, "not run"))
            if outcome.status == SCRIPT_FAILS:
                cause = cause_of(outcome.message)
            elif outcome.status in (TIMEOUT, CRASH):
                cause = "timeout or crash"
            else:
                cause = f"scripts, but {outcome.status}"
            groups[cause] += 1
            kind = message_kind(outcome.message)
            kinds[cause][kind] += 1
            at = where(outcome.message)
            examples.setdefault(f"{cause}|{kind}",
                                f"{case.file}:{case.cls} (case {case.index}): "
                                f"{first_lines(outcome.message)}" + (f" [at {at}]" if at else ""))
        causes[label] = {
            "counts": dict(groups.most_common()),
            "top": {cause: [{"count": n, "kind": kind, "example": examples[f"{cause}|{kind}"]}
                            for kind, n in kinds[cause].most_common(5)]
                    for cause in groups},
        }
    excluded = Counter(before[c.key].status for c in cases if before[c.key].status in EXCLUDED)
    return {
        "cases": len(cases), "excluded": dict(excluded), "measured": len(measured),
        "pass_before": len(passed_before), "pass_after": len(passed_after),
        "new_passes": sorted(passed_after - passed_before),
        "regressions": sorted(passed_before - passed_after),
        "causes": causes,
    }


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def print_report(result: dict[str, Any], out: Any) -> None:
    s = result["summary"]
    print(f"\nParityBench: {result['files']} files (seed {result['seed']}), {s['cases']} cases, "
          f"{s['measured']} run eagerly (excluded: {s['excluded'] or 'none'}); tsfix at "
          f"{result['commit']}, {'validated' if result['verify'] else '--no-verify'}"
          f"{', --unsafe-fixes' if result['unsafe_fixes'] else ''}", file=out)
    print(f"  scripts with parity before: {s['pass_before']} "
          f"({percent(s['pass_before'], s['measured'])})   after: {s['pass_after']} "
          f"({percent(s['pass_after'], s['measured'])})", file=out)
    print(f"  new passes: {len(s['new_passes'])}   regressions: {len(s['regressions'])}", file=out)
    for key in s["regressions"]:
        print(f"    regression: {key}: {result['cases'][key]['after']['message'][:200]}", file=out)
    t = result["tsfix"]
    print(f"  tsfix run: {t['seconds']:.0f} s, peak {t['peak_mb']:.0f} MB (tsfix and its workers), "
          f"exit {t['exit_code']}, {t['stderr_lines']} stderr lines", file=out)
    v = result["verdicts"]
    print(f"  class rewrites: {v['classes']} {v['verdicts']}; per rule {v['rules']}", file=out)
    for name in ("rejected", "unverified"):
        for reason, n in list(v[f"{name}_by_reason"].items())[:8]:
            print(f"    {name} {n:4d}: {reason}", file=out)
    if v["models"]:
        print(f"  configured models (example tables): {v['models']}", file=out)
    for path in v["failed_files"]:
        print(f"  tsfix failed on {path}", file=out)
    before, after = s["causes"]["before"]["counts"], s["causes"]["after"]["counts"]
    print("  does not pass, by cause (after / before):", file=out)
    for cause in sorted(set(before) | set(after), key=lambda c: -after.get(c, 0)):
        print(f"    {cause:38s} {after.get(cause, 0):4d} / {before.get(cause, 0):4d}", file=out)
    print("  top blockers after, per cause (count, message kind, one example):", file=out)
    for cause, tops in s["causes"]["after"]["top"].items():
        print(f"    {cause}:", file=out)
        for top in tops[:3]:
            print(f"      {top['count']:3d}  {top['kind'][:110]}\n"
                  f"           e.g. {top['example'][:320]}", file=out)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    log = sys.stderr
    source = Path(args.source).resolve() if args.source else None
    names = sample(all_files(source, Path(args.mirror)), args.n, args.seed)
    texts = {name: read_file(name, source, Path(args.mirror)) for name in names}
    work = Path(args.workdir).resolve() if args.workdir else Path(
        tempfile.mkdtemp(prefix="tsfix-paritybench-"))
    if work.exists() and any(work.iterdir()):
        raise SystemExit(f"{work} is not empty")
    print(f"paritybench: {len(names)} files in {work}", file=log, flush=True)
    imports = set().union(*(top_level_imports(t) for t in texts.values())) if texts else set()
    stubbed = absent_modules(imports, {Path(n).stem for n in names})
    original, rewritten, refs = work / "original", work / "rewritten", work / "refs"
    make_tree(original, texts, stubbed)
    make_tree(rewritten, texts, stubbed)
    refs.mkdir()
    cases: dict[str, list[Case]] = {
        name: [Case(name, i, cls, compiles)
               for i, (cls, _, _, compiles) in enumerate(testcases(texts[name]))]
        for name in names}
    all_cases = [c for file_cases in cases.values() for c in file_cases]

    before = run_phase("before", original, refs, cases, args.timeout, log)
    tables: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for case in all_cases:
        if before[case.key].status not in EXCLUDED:
            tables[case.file][case.cls].append(case.index)
    count = write_tables(rewritten, tables)
    print(f"  {count} example tables", file=log, flush=True)
    tsfix = run_tsfix(rewritten, names, not args.no_verify, args.unsafe_fixes, log)
    measured = {file: [c for c in file_cases if before[c.key].status not in EXCLUDED]
                for file, file_cases in cases.items()}
    after = run_phase("after", rewritten, refs, measured, args.timeout, log)
    summary = summarise(all_cases, before, after)
    result = {
        "commit": git_commit(), "seed": args.seed, "files": len(names), "names": names,
        "verify": not args.no_verify, "unsafe_fixes": args.unsafe_fixes,
        "stubbed_modules": stubbed, "tables": count,
        "workdir": str(work), "summary": summary,
        "tsfix": {k: v for k, v in asdict(tsfix).items() if k != "report"},
        "verdicts": verdicts(tsfix.report),
        "cases": {c.key: {"jit_compiles": c.jit_compiles, "before": asdict(before[c.key]),
                          "after": asdict(after[c.key]) if c.key in after else None}
                  for c in all_cases},
    }
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_child"]:
        _, phase, tree, file, refs, indexes = argv
        child(phase, Path(tree), file, Path(refs), [int(i) for i in indexes.split(",")])
        return 0
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").split("\n\n")[0])
    parser.add_argument("n", type=int, help="how many files to sample")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    parser.add_argument("--mirror", default=str(MIRROR),
                        help="a bare git snapshot of pytorch-jit-paritybench")
    parser.add_argument("--source", help="a folder of generated test_*.py files instead")
    parser.add_argument("--no-verify", action="store_true",
                        help="run tsfix without validation (the rewrite alone)")
    parser.add_argument("--unsafe-fixes", action="store_true",
                        help="pass --unsafe-fixes to tsfix (removes unused *args/**kwargs)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per file and phase (default 120)")
    parser.add_argument("--json", help="write the whole result here")
    parser.add_argument("--workdir", help="an empty folder to work in (kept)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    args = parser.parse_args(argv)
    result = measure(args)
    print_report(result, sys.stdout)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
