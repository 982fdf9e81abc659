"""Validation worker process: the only place tsfix imports torch.

Started by :mod:`tsfix.codemods.validation` as ``python -m tsfix.codemods.validation_worker``.
It reads one JSON job per line on stdin (a file's rewritten source and the classes to check) and
writes one JSON result per line on the stdout it was started with; user code's own prints go to
stderr. torch is imported once per worker, not once per model.

For every class, with every example configuration (``init`` variant):

1. build the original and the rewritten class with the same seed, copy the original's
   ``state_dict`` into the rewritten instance, eval mode;
2. eager parity: the rewritten output equals the original's;
3. re-script: ``torch.jit.script`` of the rewritten instance succeeds and matches;
4. one artifact: the instance scripted from the first configuration, given each other
   configuration's weights and lifted-argument values, reproduces that configuration;
5. the artifact survives ``torch.jit.save``/``load`` with the same outputs.

Outputs match when every tensor is ``allclose`` with rtol 1e-4, atol 1e-5.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

RTOL, ATOL = 1e-4, 1e-5
SEED = 0

# torch 2.13 marks every torch.jit entry point deprecated; validation uses them on purpose.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=DeprecationWarning)


class Verdict(Exception):
    """Ends one class's validation with a verdict other than verified."""

    def __init__(self, verdict: str, reason: str) -> None:
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason


def rejected(reason: str) -> Verdict:
    return Verdict("rejected", reason)


def unverified(reason: str) -> Verdict:
    return Verdict("unverified", reason)


def short_error(exc: BaseException, rename: dict[str, str] | None = None) -> str:
    """One readable line: the message's first line and, for TorchScript, where it points."""
    text = str(exc).strip()
    for temp, real in (rename or {}).items():
        text = text.replace(temp, real)
    lines = [line.strip() for line in text.splitlines() if line.strip() and line.strip() != ":"]
    first = lines[0].rstrip(":").rstrip() if lines else ""
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


def clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(clone(v) for v in value)
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    return value


def configurations(example: dict[str, Any]) -> list[tuple[dict[str, Any], tuple[Any, ...],
                                                          dict[str, Any]]]:
    if example.get("factory"):
        module_name, _, function_name = example["factory"].partition(":")
        try:
            function = getattr(importlib.import_module(module_name), function_name)
            produced = list(function())
        except BaseException as exc:
            raise unverified(f"example factory {example['factory']} failed: "
                             f"{short_error(exc)}") from exc
        triples = []
        for i, item in enumerate(produced):
            if (not isinstance(item, tuple | list) or len(item) != 3
                    or not isinstance(item[0], dict) or not isinstance(item[2], dict)):
                raise unverified(f"example factory {example['factory']} item {i}: expected "
                                 "(init_kwargs: dict, args: tuple, kwargs: dict)")
            triples.append((dict(item[0]), tuple(item[1]), dict(item[2])))
        if not triples:
            raise unverified(f"example factory {example['factory']} returned no examples")
        return triples
    generator = torch.Generator().manual_seed(SEED)
    inputs = tuple(materialize(example["inputs"], generator))
    kwargs = materialize(example["kwargs"], generator)
    return [(materialize(init, generator), inputs, kwargs) for init in example["init"]]


# ---- comparison --------------------------------------------------------------------------------

def difference(expected: Any, got: Any, where: str = "output") -> str | None:
    """None when equal within tolerance, else what differs first."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{where}: expected a tensor, got {type(got).__name__}"
        if expected.shape != got.shape or expected.dtype != got.dtype:
            return (f"{where}: expected {tuple(expected.shape)} {expected.dtype}, "
                    f"got {tuple(got.shape)} {got.dtype}")
        if expected.dtype.is_floating_point or expected.dtype.is_complex:
            if not torch.allclose(got, expected, rtol=RTOL, atol=ATOL, equal_nan=True):
                diff = (got - expected).abs().nan_to_num(float("inf")).max().item()
                return f"{where}: max abs diff {diff:.3g}"
            return None
        return None if torch.equal(got, expected) else f"{where}: values differ"
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


def call(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
         extra: dict[str, Any] | None = None) -> Any:
    torch.manual_seed(SEED)
    with torch.no_grad():
        return module(*clone(args), **clone(kwargs), **(extra or {}))


def build(cls: type, init: dict[str, Any]) -> Any:
    torch.manual_seed(SEED)
    instance = cls(**clone(init))
    instance.eval()
    return instance


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


# ---- one class ---------------------------------------------------------------------------------

def validate_class(original: types.ModuleType, rewritten: types.ModuleType,
                   job_class: dict[str, Any], rename: dict[str, str]) -> dict[str, Any]:
    started = time.perf_counter()
    name = job_class["name"]
    try:
        notes = check_class(original, rewritten, job_class, rename)
        verdict, reason = "verified", notes
    except Verdict as outcome:
        verdict, reason = outcome.verdict, outcome.reason
    except BaseException as exc:
        verdict, reason = "unverified", f"validation error: {short_error(exc, rename)}"
    return {"name": name, "verdict": verdict, "reason": reason,
            "duration_s": round(time.perf_counter() - started, 3)}


def check_class(original: types.ModuleType, rewritten: types.ModuleType,
                job_class: dict[str, Any], rename: dict[str, str]) -> str:
    name = job_class["name"]
    lifted: dict[str, str] = job_class["lifted"]
    original_cls = getattr(original, name, None)
    rewritten_cls = getattr(rewritten, name, None)
    if original_cls is None or rewritten_cls is None:
        raise unverified(f"class {name} is not defined at module level")
    configs = configurations(job_class["example"])

    # 1-2: build both, eager parity.
    originals, rewrites, expected = [], [], []
    for k, (init, args, kwargs) in enumerate(configs):
        label = f"init[{k}] {init}" if init else f"init[{k}]"
        try:
            orig = build(original_cls, init)
        except BaseException as exc:
            raise unverified(f"the original constructor raised for {label}: "
                             f"{short_error(exc)}") from exc
        try:
            new = build(rewritten_cls, init)
            new.load_state_dict(orig.state_dict())
        except BaseException as exc:
            raise rejected(f"build: the rewritten class fails for {label}: "
                           f"{short_error(exc, rename)}") from exc
        try:
            want = call(orig, args, kwargs)
        except BaseException as exc:
            raise unverified(f"the original forward raised for {label}: "
                             f"{short_error(exc)}") from exc
        if difference(want, call(orig, args, kwargs)) is not None:
            raise unverified(f"nondeterministic model: two identical calls differ for {label}")
        try:
            got = call(new, args, kwargs)
        except BaseException as exc:
            raise rejected(f"eager parity: the rewritten forward raised for {label}: "
                           f"{short_error(exc, rename)}") from exc
        found = difference(want, got)
        if found:
            raise rejected(f"eager parity: {found} for {label}")
        originals.append(orig)
        rewrites.append(new)
        expected.append(want)

    # 3: re-script every configuration.
    scripted = []
    for k, (new, (_init, args, kwargs)) in enumerate(zip(rewrites, configs, strict=True)):
        try:
            artifact = torch.jit.script(new)
        except BaseException as exc:
            error = short_error(exc, rename)
            try:
                torch.jit.script(originals[k])
            except BaseException as original_exc:
                raise unverified(
                    "eager parity holds, but the class does not script before or after this "
                    f"rewrite, for a reason this rule does not fix: "
                    f"{short_error(original_exc)}") from exc
            raise rejected(f"re-script: {error}") from exc
        try:
            got = call(artifact, args, kwargs)
        except BaseException as exc:
            raise rejected(f"re-script: the scripted module raised for init[{k}]: "
                           f"{short_error(exc, rename)}") from exc
        found = difference(expected[k], got)
        if found:
            raise rejected(f"re-script: {found} for init[{k}]")
        scripted.append(artifact)

    # 4: one artifact serves every configuration through the lifted arguments.
    notes = []
    artifact = scripted[0]
    base_settings = plain_settings(rewrites[0], set(lifted.values()))
    base_shapes = {k: v.shape for k, v in originals[0].state_dict().items()}
    served = []
    for k in range(len(configs)):
        shapes = {key: v.shape for key, v in originals[k].state_dict().items()}
        settings = plain_settings(rewrites[k], set(lifted.values()))
        if shapes != base_shapes:
            notes.append(f"init[{k}] has other parameter shapes")
            continue
        differing = sorted(key for key in settings if settings[key] != base_settings.get(key))
        if differing:
            notes.append(f"init[{k}] also differs in {', '.join(differing[:3])}")
            continue
        served.append(k)

    def check_artifact(module: Any, step: str) -> None:
        for k in served:
            _init, args, kwargs = configs[k]
            values = {param: getattr(rewrites[k], attr) for param, attr in lifted.items()}
            module.load_state_dict(originals[k].state_dict())
            try:
                got = call(module, args, kwargs, values)
            except BaseException as exc:
                raise rejected(f"{step}: raised for init[{k}] with {values}: "
                               f"{short_error(exc, rename)}") from exc
            found = difference(expected[k], got)
            if found:
                raise rejected(f"{step}: {found} for init[{k}] called with {values}")

    check_artifact(artifact, "one artifact")

    # 5: save / load.
    buffer = io.BytesIO()
    try:
        torch.jit.save(artifact, buffer)
        buffer.seek(0)
        loaded = torch.jit.load(buffer)  # type: ignore[no-untyped-call]
    except BaseException as exc:
        raise rejected(f"save/load: {short_error(exc, rename)}") from exc
    check_artifact(loaded, "save/load")

    summary = (f"{len(configs)} configuration(s): eager parity, re-script, save/load; one "
               f"artifact served {len(served)} of {len(configs)}")
    if notes:
        summary += f" (not comparable: {'; '.join(notes)})"
    return summary


# ---- one job (one file) ------------------------------------------------------------------------

@contextlib.contextmanager
def import_context(job: dict[str, Any]) -> Iterator[Callable[[], tuple[types.ModuleType,
                                                                        types.ModuleType,
                                                                        dict[str, str]]]]:
    path = Path(job["path"]).resolve()
    package, root = package_of(path)
    added = [str(root), *job.get("sys_path", [])]
    for entry in reversed(added):
        sys.path.insert(0, entry)
    workdir = Path(tempfile.mkdtemp(prefix="tsfix-validate-"))
    stem = identifier(path.stem)
    original_name = f"{package}.{stem}" if package else f"_tsfix_original_{stem}"
    rewritten_name = (f"{package}._tsfix_rewritten_{stem}" if package
                      else f"_tsfix_rewritten_{stem}")
    before = set(sys.modules)

    def load() -> tuple[types.ModuleType, types.ModuleType, dict[str, str]]:
        if package:
            importlib.import_module(package)
        try:
            original = load_module(original_name, path)
        except BaseException as exc:
            raise unverified(f"importing the original failed: {short_error(exc)}") from exc
        rewritten_path = workdir / f"{stem}.py"
        rewritten_path.write_text(job["source"], encoding="utf-8")
        rename = {str(rewritten_path): f"the rewritten {path.name}"}
        try:
            rewritten = load_module(rewritten_name, rewritten_path)
        except BaseException as exc:
            raise rejected(f"the rewritten file does not import: "
                           f"{short_error(exc, rename)}") from exc
        return original, rewritten, rename

    try:
        yield load
    finally:
        # Forget the user's modules so the next job sees its own files fresh.
        for name in set(sys.modules) - before:
            sys.modules.pop(name, None)
        for entry in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)
        shutil.rmtree(workdir, ignore_errors=True)


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    results = []
    with import_context(job) as load:
        try:
            original, rewritten, rename = load()
        except Verdict as outcome:
            return {"id": job["id"], "classes": [
                {"name": c["name"], "verdict": outcome.verdict, "reason": outcome.reason,
                 "duration_s": 0.0} for c in job["classes"]]}
        for job_class in job["classes"]:
            results.append(validate_class(original, rewritten, job_class, rename))
    return {"id": job["id"], "classes": results}


def main() -> None:
    # Results go to the stdout we were started with; anything user code prints goes to stderr.
    results = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    torch.set_num_threads(int(os.environ.get("TSFIX_WORKER_THREADS", "1")))
    results.write(json.dumps({"ready": True}) + "\n")
    results.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            result = run_job(job)
        except BaseException:
            result = {"id": job.get("id"), "error": traceback.format_exc(limit=5)}
        results.write(json.dumps(result) + "\n")
        results.flush()


if __name__ == "__main__":
    main()
