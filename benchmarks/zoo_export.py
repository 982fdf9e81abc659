"""How many classes of the pinned model zoo ``torch.export`` keeps, before and after tsfix.

    python benchmarks/zoo_export.py                         # the three packages, before and after
    python benchmarks/zoo_export.py --packages torchaudio --limit 20 --json out.json
    python benchmarks/zoo_export.py --before-only           # no tsfix run
    python benchmarks/zoo_export.py --strict-too            # also strict=True, to compare

The zoo of ``tests/zoo.py`` (asteroid 0.7.0, speechbrain 1.0.3, torchaudio 2.11.0, installed once
and cached). Every top-level class of the packages' ``.py`` files that is an ``nn.Module`` is a
class here. Its example comes from what tsfix already has: the configured models' tables of
``tests/zoo.py`` (``DEVELOPMENT_TARGETS``, ``OTHER_MODELS``), else the automatic example of the
validation worker (``automatic_instance``: built with its defaults, an input guessed from its
first layer). A class that cannot be built, whose input cannot be guessed, or whose original does
not run eagerly on that input has "no example".

Each class with an example is run eagerly, then ``torch.export.export(..., strict=False)``: it
exports (with or without parity between the exported program and the eager output) or fails, and
a failure gets a cause from torch.export's message and the first frame in the zoo's code. Classes
that export and have ``TSF204`` findings (``tsfix check``: a bool/int/str setting read in a test
of the code forward runs) "bake a config branch": the program keeps only the path chosen at
construction.

Then ``tsfix apply --target export --no-verify`` rewrites a copy of the packages, and the same
classes are measured again on the copy. A class whose ``forward`` gained parameters (lifted
settings) is exported once with the setting passed as a 0-d tensor of its current value, and that
ONE program is called with ``torch.tensor(True)`` and ``torch.tensor(False)`` for each bool
setting, against the rewritten class run eagerly with the attribute set to that value.

Classes run in child processes, a chunk at a time (imports are heavy; a crash or a hang costs one
class: the chunk restarts after it), with a per-class time limit. ``TSFIX_SKIP_CORPUS=1`` skips
the run (exit code 0, a message), as the zoo tests do.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import zoo  # tests/zoo.py: the pinned zoo the tests use too

PACKAGES = ("asteroid", "speechbrain", "torchaudio")
CLI = "import sys; from tsfix.cli.main import main; main(sys.argv[1:])"

# Statuses of one class.
EXPORTS, FAILS, NO_EXAMPLE, NOT_MODULE, UNIMPORTABLE = (
    "exports", "fails", "no example", "not a module", "file does not import")
# Failure causes, in the order they are tried (the first that matches wins).
CAUSES = ("data-dependent guard", "data-dependent size (.item/.tolist)",
          "unsupported Python construct", "numpy", "timeout", "crash", "other",
          "the rewrite does not run eagerly")
BROKEN = CAUSES[-1]


# ---- the classes ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    path: str           # relative to the site, "/"-separated
    cls: str
    line: int

    @property
    def key(self) -> str:
        return f"{self.path}:{self.cls}"

    @property
    def module(self) -> str:
        parts = self.path.removesuffix(".py").split("/")
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_classes(site: Path, packages: Iterable[str]) -> list[Target]:
    found = []
    for package in packages:
        for path in sorted((site / package).rglob("*.py")):
            relative = path.relative_to(site).as_posix()
            if "__pycache__" in relative:
                continue
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            found += [Target(relative, node.name, node.lineno) for node in tree.body
                      if isinstance(node, ast.ClassDef)]
    return found


def config_branch_classes(root: Path, paths: Iterable[str]) -> dict[str, list[str]]:
    """``path:Class`` -> its TSF204 findings (``line: message``) in the files under ``root``."""
    from tsfix.codemods.lint.check import CheckSyntaxError, check_source

    found: dict[str, list[str]] = {}
    for path in sorted(set(paths)):
        try:
            findings = check_source((root / path).read_text(encoding="utf-8"), path)
        except (CheckSyntaxError, OSError):
            continue
        for f in findings:
            if f.code == "TSF204" and f.class_name:
                found.setdefault(f"{path}:{f.class_name}", []).append(f"{f.line}: {f.message}")
    return found


def configured_examples() -> dict[str, dict[str, Any]]:
    """``path:Class`` -> {"init": ..., "inputs": [...]} from the zoo's configured models."""
    return {m.key: {"init": dict(m.init), "inputs": list(m.inputs)}
            for m in zoo.DEVELOPMENT_TARGETS + zoo.OTHER_MODELS}


# ---- the child process ---------------------------------------------------------------------------

class ClassTimeout(BaseException):
    """The per-class time limit (a BaseException: model code may catch Exception)."""


def _first_user_frame(exc: BaseException, roots: Sequence[str]) -> tuple[str, int, str] | None:
    """(path relative to its root, line, source line) of the innermost frame in the zoo's code
    (the frame nearest the failure, where the construct is), else of a frame torch's message
    names."""
    import linecache
    import traceback

    best = None
    for frame in traceback.extract_tb(exc.__traceback__):
        for root in roots:
            if frame.filename.startswith(root + os.sep):
                best = (frame.filename[len(root) + 1:], frame.lineno or 0,
                        (frame.line or "").strip())
    if best is not None:
        return best
    for match in re.finditer(r'File "([^"]+)", line (\d+)', str(exc)):
        for root in roots:
            if match.group(1).startswith(root + os.sep):
                line = int(match.group(2))
                best = (match.group(1)[len(root) + 1:], line,
                        linecache.getline(match.group(1), line).strip())
    return best


def cause_of(message: str, source_line: str) -> str:
    """One of CAUSES for an export failure, from torch.export's message and the zoo's line."""
    if re.search(r"specialized integer|data-dependent size|unbacked symint", message) or (
            "data-dependent" in message and re.search(r"\.item\(\)|\.tolist\(\)", source_line)):
        return CAUSES[1]
    if "data-dependent" in message or "GuardOnDataDependentSymNode" in message:
        return CAUSES[0]
    if re.search(r"\bnumpy\b|\bnp\.|ndarray", message + "\n" + source_line):
        return CAUSES[3]
    # "Unexpected key _export_root...": non-strict export's module stack after an exception
    # raised and caught inside forward (speechbrain's try: layer(x, lengths=...) except
    # TypeError); strict export says "failed to bind arguments" at the same call.
    if re.search(r"Unsupported|not supported|unsupported|Unexpected key _export_root|"
                 r"failed to bind arguments|torch\._dynamo\.exc", message):
        return CAUSES[2]
    return "other"


def data_dependent_origin(exc: BaseException, roots: Sequence[str]) -> str:
    """``path:line: source`` of the first ``.item()`` / ``.tolist()`` in the zoo functions on the
    failure's stack: where an unbacked value usually comes from (the failure itself is often
    reported later, where the value is used)."""
    import inspect

    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if any(code.co_filename.startswith(root + os.sep) for root in roots):
            root = next(r for r in roots if code.co_filename.startswith(r + os.sep))
            try:
                lines, first = inspect.getsourcelines(code)
            except (OSError, TypeError):
                lines, first = [], 0
            for offset, text in enumerate(lines):
                if re.search(r"\.item\(\)|\.tolist\(\)", text):
                    return (f"{code.co_filename[len(root) + 1:]}:{first + offset}: "
                            f"{text.strip()}")
        tb = tb.tb_next
    return ""


def _where(exc: BaseException, roots: Sequence[str]) -> str:
    where = _first_user_frame(exc, roots)
    return f"{where[0]}:{where[1]}: {where[2]}" if where else ""


def _head(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def child_main() -> None:
    """Measure the classes of the job on stdin; one JSON line per event on stdout."""
    job = json.loads(sys.stdin.read())
    roots = [str(Path(r).resolve()) for r in job["roots"]]
    sys.path[:0] = roots
    import signal
    import warnings

    warnings.filterwarnings("ignore")
    import inspect

    import torch
    from tsfix.codemods.pipeline.config import parse_value
    from tsfix.codemods.validation import worker

    torch.set_num_threads(1)

    def alarm(signum: int, frame: Any) -> None:
        raise ClassTimeout()

    signal.signal(signal.SIGALRM, alarm)

    def emit(**event: Any) -> None:
        print(json.dumps(event, default=str), flush=True)

    if job.get("mode") == "reach":
        for model_key, table in job["models"].items():
            try:
                reached = reached_calls(model_key, table, roots[0], worker, parse_value)
            except BaseException as exc:
                emit(event="reach", model=model_key, error=_head(exc))
                continue
            emit(event="reach", model=model_key, classes=sorted(reached))
        return
    from_models: dict[str, Any] = {}       # model key -> reached_calls(), or its exception
    outputs = Path(job["outputs"])
    outputs.mkdir(parents=True, exist_ok=True)
    for item in job["classes"]:
        key, module_name, cls_name = item["key"], item["module"], item["cls"]
        emit(event="start", key=key)
        record: dict[str, Any] = {"event": "done", "key": key}
        signal.alarm(int(job["timeout"]))
        phase = "import"
        try:
            try:
                module = __import__(module_name, fromlist=["_"])
            except BaseException as exc:
                if isinstance(exc, ClassTimeout):
                    raise
                record.update(status=UNIMPORTABLE, detail=_head(exc))
                continue
            cls = getattr(module, cls_name, None)
            if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
                record.update(status=NOT_MODULE)
                continue
            record["forward_params"] = list(inspect.signature(cls.forward).parameters)
            phase = "example"
            emit(event="phase", key=key, phase=phase)
            table = item.get("table")
            kwargs: dict[str, Any] = {}
            try:
                if item.get("from_model") and table is None:
                    source = item["from_model"]
                    if source not in from_models:
                        try:
                            from_models[source] = reached_calls(
                                source, job["models"][source], roots[0], worker, parse_value)
                        except ClassTimeout:
                            raise
                        except BaseException as exc:
                            from_models[source] = exc   # the next class of this model too
                    if isinstance(from_models[source], BaseException):
                        raise from_models[source]
                    if key not in from_models[source]:
                        raise worker.unverified(f"{source} did not call a {cls_name} here")
                    model, args, kwargs = from_models[source][key]
                    record["example"] = f"inside {source}"
                elif table is not None:
                    generator = torch.Generator().manual_seed(worker.SEED)
                    init = worker.materialize(parse_value(table["init"], key), generator)
                    args = tuple(worker.materialize(parse_value(table["inputs"], key),
                                                    generator))
                    record["example"] = "table"
                else:
                    instance = worker.automatic_instance(cls, key)
                    init, (args, _) = instance.init, instance.calls[0]
                    record["example"] = instance.guessed
                if not (item.get("from_model") and table is None):
                    model = worker.build(cls, init)
            except worker.Verdict as exc:
                record.update(status=NO_EXAMPLE, detail=exc.reason[:300])
                continue
            except ClassTimeout:
                raise
            except BaseException as exc:
                record.update(status=NO_EXAMPLE, detail="build: " + _head(exc),
                              where=_where(exc, roots))
                continue
            phase = "eager"
            try:
                expected = worker.call(model, args, kwargs)
            except ClassTimeout:
                raise
            except BaseException as exc:
                record.update(status=NO_EXAMPLE, where=_where(exc, roots),
                              detail=f"the {job.get('label', 'original')} does not run on the "
                                     f"example: {_head(exc)}")
                continue
            saved = item.get("compare_with")
            if saved:
                if os.path.exists(saved):
                    reference = torch.load(saved, weights_only=False)
                    record["eager_parity"] = worker.difference(reference, expected) or "same"
            else:
                try:
                    torch.save(expected, outputs / f"{item['index']}.pt")
                    record["saved"] = str(outputs / f"{item['index']}.pt")
                except Exception:
                    pass
            for strict in job["strict"]:
                phase = f"export strict={strict}"
                emit(event="phase", key=key, phase=phase)
                name = "strict" if strict else "export"
                started = time.perf_counter()
                try:
                    program = torch.export.export(model, worker.clone(args),
                                                  worker.clone(kwargs), strict=strict)
                except ClassTimeout:
                    raise
                except BaseException as exc:
                    where = _first_user_frame(exc, roots)
                    record[name] = {"ok": False, "head": _head(exc),
                                    "cause": cause_of(str(exc), where[2] if where else ""),
                                    "where": f"{where[0]}:{where[1]}" if where else "",
                                    "line": where[2] if where else ""}
                    if record[name]["cause"] in CAUSES[:2]:
                        record[name]["origin"] = data_dependent_origin(exc, roots)
                    if not where and not strict:
                        record[name].update(strict_frame(model, args, kwargs, roots, worker))
                    continue
                finally:
                    record[f"{name}_s"] = round(time.perf_counter() - started, 2)
                try:
                    got = worker.call(program.module(), args, kwargs)
                    parity = worker.difference(expected, got) or "same"
                except ClassTimeout:
                    raise
                except BaseException as exc:
                    parity = "calling the exported program: " + _head(exc)
                record[name] = {"ok": True, "parity": parity}
            record["status"] = EXPORTS if record["export"]["ok"] else FAILS
            # A rejected rewrite is in the report but not in the file: only what forward takes.
            lifted = {attr: param for attr, param in (item.get("lifted") or {}).items()
                      if param in record["forward_params"]}
            for p in record["forward_params"]:
                if (item.get("original_params") is not None
                        and p not in item["original_params"] and p not in lifted.values()):
                    lifted[p] = p
            if lifted:
                phase = "lifted"
                emit(event="phase", key=key, phase=phase)
                record["lifted"] = one_program_check(model, args, kwargs, lifted, worker)
        except ClassTimeout:
            record.update(status=FAILS if phase.startswith("export") else NO_EXAMPLE,
                          detail=f"timed out after {job['timeout']} s in {phase}")
            if phase.startswith("export"):
                record["export"] = {"ok": False, "cause": "timeout", "head": record["detail"],
                                    "where": "", "line": ""}
        finally:
            signal.alarm(0)
            emit(**record)


def strict_frame(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 roots: Sequence[str], worker: Any) -> dict[str, str]:
    """Where strict export stops, for a non-strict failure whose traceback holds no frame of
    the zoo (strict names the frame in its message)."""
    import torch

    try:
        torch.export.export(model, worker.clone(args), worker.clone(kwargs), strict=True)
    except ClassTimeout:
        raise
    except BaseException as exc:
        where = _first_user_frame(exc, roots)
        if where:
            return {"where": f"{where[0]}:{where[1]}", "line": where[2],
                    "strict_head": _head(exc)}
    return {}


def reached_calls(model_key: str, table: dict[str, Any], root: str, worker: Any,
                  parse_value: Any) -> dict[str, tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """``path:Class`` -> (instance, args, kwargs) for each top-level class of the tree that the
    configured model ``model_key`` holds an instance of and calls: the first such instance and its
    first call, recorded with the hooks tsfix's model validation uses (validation/model.py)."""
    import torch
    from tsfix.codemods.validation.model import Recorder, Seen

    path, _, name = model_key.partition(":")
    module = __import__(path.removesuffix(".py").replace("/", "."), fromlist=["_"])
    generator = torch.Generator().manual_seed(worker.SEED)
    init = worker.materialize(parse_value(table["init"], model_key), generator)
    args = tuple(worker.materialize(parse_value(table["inputs"], model_key), generator))
    model = worker.build(getattr(module, name), init)
    seen = []
    for sub_path, sub in model.named_modules():
        file = getattr(sys.modules.get(type(sub).__module__), "__file__", None) or ""
        qualname = type(sub).__qualname__
        if sub_path and file.startswith(root + os.sep) and "." not in qualname:
            relative = file[len(root) + 1:].replace(os.sep, "/")
            seen.append(Seen(0, sub_path, sub, f"{relative}:{qualname}", qualname))
    recorder = Recorder()
    with recorder.attached(seen):
        worker.call(model, args, {})
    found: dict[str, tuple[Any, tuple[Any, ...], dict[str, Any]]] = {}
    for item in seen:
        if item.calls and item.file not in found:
            found[item.file] = (item.module, item.calls[0].args, item.calls[0].kwargs)
    return found


def one_program_check(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                      lifted: dict[str, str], worker: Any) -> dict[str, Any]:
    """Export once with each lifted setting passed as a tensor of its value, then call that one
    program with torch.tensor(True/False) for each bool setting, against the class run eagerly
    with the attribute set to that value."""
    import torch

    values = {name: getattr(model, name, None) for name in lifted}
    settings = {lifted[name]: torch.tensor(v) for name, v in values.items()
                if isinstance(v, bool | int | float)}
    result: dict[str, Any] = {"settings": {n: repr(v) for n, v in values.items()}}
    try:
        program = torch.export.export(model, worker.clone(args),
                                      worker.clone({**kwargs, **settings}), strict=False)
    except Exception as exc:
        result["exports"] = _head(exc)
        return result
    result["exports"] = "yes"
    checked = {}
    for name, value in values.items():
        if not isinstance(value, bool):
            checked[name] = f"not checked: a {type(value).__name__} setting"
            continue
        verdicts = []
        for flipped in (True, False):
            try:
                setattr(model, name, flipped)
                expected = worker.call(model, args, kwargs)
            except Exception as exc:
                verdicts.append(f"{flipped}: eager fails ({_head(exc)[:80]})")
                continue
            finally:
                setattr(model, name, value)
            try:
                got = worker.call(program.module(), args,
                                  {**kwargs, **settings, lifted[name]: torch.tensor(flipped)})
                verdicts.append(f"{flipped}: {worker.difference(expected, got) or 'same'}")
            except Exception as exc:
                verdicts.append(f"{flipped}: the program fails ({_head(exc)[:80]})")
        checked[name] = "; ".join(verdicts)
    result["checked"] = checked
    result["one_program"] = all(v.count(": same") == 2 for v in checked.values()) and bool(
        checked) and all(not v.startswith("not checked") for v in checked.values())
    return result


# ---- running the children ------------------------------------------------------------------------

@dataclass
class Measured:
    target: Target
    status: str = ""
    detail: str = ""
    record: dict[str, Any] = field(default_factory=dict)


def measure(targets: Sequence[Target], roots: Sequence[Path], tables: dict[str, dict[str, Any]],
            outputs: Path, *, reached: dict[str, str], timeout: float, strict: Sequence[bool],
            chunk: int, jobs: int,
            compare: dict[str, str] | None = None,
            original_params: dict[str, list[str]] | None = None,
            lifts: dict[str, dict[str, str]] | None = None,
            label: str = "") -> dict[str, Measured]:
    """Every target measured in child processes importing from ``roots`` (first wins)."""
    results: dict[str, Measured] = {}
    pending = list(enumerate(targets))
    chunks = [pending[i:i + chunk] for i in range(0, len(pending), chunk)]
    lock = threading.Lock()
    started = time.perf_counter()

    def run_chunk(items: list[tuple[int, Target]]) -> None:
        while items:
            job = {"roots": [str(r) for r in roots], "timeout": timeout, "strict": list(strict),
                   "outputs": str(outputs), "models": tables,
                   "label": "rewrite" if compare is not None else "original",
                   "classes": [{"index": i, "key": t.key, "module": t.module, "cls": t.cls,
                                "table": tables.get(t.key),
                                "from_model": reached.get(t.key),
                                "compare_with": (compare or {}).get(t.key),
                                "original_params": (original_params or {}).get(t.key),
                                "lifted": (lifts or {}).get(t.key)}
                               for i, t in items]}
            done = _run_child(job, timeout)
            by_key = {t.key: (i, t) for i, t in items}
            last_started = None
            for event in done:
                if event.get("event") == "start":
                    last_started = event["key"], "import"
                elif event.get("event") == "phase":
                    last_started = event["key"], event["phase"]
                elif event.get("event") == "done" and event["key"] in by_key:
                    target = by_key[event["key"]][1]
                    with lock:
                        results[target.key] = Measured(target, event.get("status", "?"),
                                                       event.get("detail", ""), event)
                    last_started = None
            finished = {k for k in by_key if k in results}
            if last_started is not None and last_started[0] not in finished:
                key, phase = last_started
                target = by_key[key][1]
                exporting = phase.startswith("export")
                detail = f"the child process died or hung in {phase}"
                record: dict[str, Any] = {"key": key}
                if exporting:
                    record["export"] = {"ok": False, "cause": "crash", "head": detail,
                                        "where": "", "line": ""}
                with lock:
                    results[key] = Measured(target, FAILS if exporting else NO_EXAMPLE,
                                            detail, record)
                finished.add(key)
            remaining = [(i, t) for i, t in items if t.key not in finished]
            if len(remaining) == len(items):      # the child did not even start: give up
                for _, t in remaining:
                    with lock:
                        results[t.key] = Measured(t, NO_EXAMPLE, "the child process failed")
                remaining = []
            items = remaining
            with lock:
                print(f"  {label}{len(results)}/{len(targets)} classes "
                      f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    work: queue.Queue[list[tuple[int, Target]]] = queue.Queue()
    for c in chunks:
        work.put(c)

    def worker_loop() -> None:
        while True:
            try:
                items = work.get_nowait()
            except queue.Empty:
                return
            run_chunk(items)

    threads = [threading.Thread(target=worker_loop) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def reached_classes(roots: Sequence[Path], tables: dict[str, dict[str, Any]],
                    timeout: float) -> tuple[dict[str, str], list[str]]:
    """``path:Class`` -> the first configured model that holds and calls an instance of it;
    and the models that could not be run."""
    events = _run_child({"mode": "reach", "roots": [str(r) for r in roots], "models": tables,
                         "timeout": timeout}, timeout * len(tables))
    reached: dict[str, str] = {}
    problems = []
    for event in events:
        if "error" in event:
            problems.append(f"{event['model']}: {event['error']}")
        for key in event.get("classes", []):
            reached.setdefault(key, event["model"])
    return reached, problems


def _run_child(job: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
    """The child's events; a child silent for longer than the class time limit (plus slack for
    imports) is killed."""
    process = subprocess.Popen([sys.executable, __file__, "--child"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(job))
    process.stdin.close()
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    events = []
    while True:
        try:
            line = lines.get(timeout=timeout + 120)
        except queue.Empty:
            process.kill()
            break
        if line is None:
            break
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    process.wait()
    return events


# ---- tsfix on a copy -----------------------------------------------------------------------------

def apply_tsfix(site: Path, packages: Sequence[str], dest: Path, jobs: int, *,
                verify: bool = False) -> tuple[int, str, dict[str, Any]]:
    """``tsfix apply --target export --no-verify`` on a copy of ``packages`` (with ``verify``:
    validated, the configured models of those packages in its pyproject.toml): exit code, the
    output's tail and the report."""
    models = [m for m in zoo.DEVELOPMENT_TARGETS + zoo.OTHER_MODELS
              if m.path.split("/")[0] in packages] if verify else []
    project = zoo.make_project(dest, packages, models, site=site)
    report = dest.parent / "tsfix-report.json"
    command = [sys.executable, "-c", CLI, "apply", "--target", "export",
               *([] if verify else ["--no-verify"]), "--allow-unscriptable",
               "--no-cache", "--report", str(report), "-j", str(jobs), *packages]
    done = subprocess.run(command, cwd=project.root, env=project.env(), capture_output=True,
                          text=True, check=False)
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
    data = json.loads(report.read_text(encoding="utf-8")) if report.is_file() else {}
    return done.returncode, tail, data


# ---- the table -----------------------------------------------------------------------------------

def counts(results: dict[str, Measured], branches: dict[str, list[str]]) -> dict[str, Any]:
    modules = [m for m in results.values() if m.status in (EXPORTS, FAILS, NO_EXAMPLE)]
    exports = [m for m in modules if m.status == EXPORTS]
    fails = [m for m in modules if m.status == FAILS]
    causes = Counter(m.record.get("export", {}).get("cause", "other") for m in fails)
    return {
        "classes": len(modules),
        "no example": sum(m.status == NO_EXAMPLE for m in modules),
        "with example": len(exports) + len(fails),
        "exports": len(exports),
        "exports with parity": sum(m.record.get("export", {}).get("parity") == "same"
                                   for m in exports),
        "fails": len(fails),
        "fails by cause": {c: causes[c] for c in CAUSES if causes[c]},
        "bakes a config branch": sum(m.target.key in branches for m in exports),
        # Static, every class: tsfix check's TSF204 sites, with or without an example.
        "has a config branch (TSF204)": sum(m.target.key in branches for m in modules),
        "not a module": sum(m.status == NOT_MODULE for m in results.values()),
        "file does not import": sum(m.status == UNIMPORTABLE for m in results.values()),
    }


def ratio(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else f"{a}/0"


def print_table(before: dict[str, Any], after: dict[str, Any] | None) -> None:
    rows: list[tuple[str, Any, Any]] = []
    for key in ("classes", "no example", "with example", "exports", "exports with parity",
                "fails"):
        rows.append((key, before[key], after[key] if after else ""))
    for cause in CAUSES:
        b = before["fails by cause"].get(cause, 0)
        a = after["fails by cause"].get(cause, 0) if after else 0
        if b or a:
            rows.append((f"  fails: {cause}", b, a if after else ""))
    for key in ("bakes a config branch", "has a config branch (TSF204)"):
        rows.append((key, before[key], after[key] if after else ""))
    print(f"\n{'':<48} {'before':>8} {'after':>8}")
    for name, b, a in rows:
        print(f"{name:<48} {b!s:>8} {a!s:>8}")
    print(f"(not counted: {before['not a module']} top-level classes that are not nn.Module, "
          f"{before['file does not import']} in files that do not import)")
    print("\nexports / with example: before " + ratio(before["exports"], before["with example"])
          + ("; after " + ratio(after["exports"], after["with example"]) if after else ""))
    print("exports / classes: before " + ratio(before["exports"], before["classes"])
          + ("; after " + ratio(after["exports"], after["classes"]) if after else ""))


def print_blockers(results: dict[str, Measured], top: int = 3) -> None:
    fails = [m for m in results.values() if m.status == FAILS]
    by_cause: dict[str, list[Measured]] = {}
    for m in fails:
        by_cause.setdefault(m.record.get("export", {}).get("cause", "other"), []).append(m)
    print("\nblockers (export failures by cause, with examples):")
    for cause in sorted(by_cause, key=lambda c: -len(by_cause[c])):
        group = by_cause[cause]
        print(f"  {cause}: {len(group)}")
        heads = Counter(_generic(m.record["export"].get("head", "")) for m in group)
        for head, n in heads.most_common(top):
            example = next(m for m in group
                           if _generic(m.record["export"].get("head", "")) == head)
            where = example.record["export"].get("where") or example.target.path
            print(f"    {n:3d} x {head[:110]}")
            print(f"          e.g. {example.target.cls} at {where}: "
                  f"{example.record['export'].get('line', '')[:80]}")
            if example.record["export"].get("origin"):
                print(f"          value from {example.record['export']['origin'][:100]}")
    no_example = Counter(_generic(m.detail) for m in results.values()
                         if m.status == NO_EXAMPLE)
    print("\nno example, by reason:")
    for reason, n in no_example.most_common(6):
        print(f"  {n:4d}  {reason[:120]}")


def _generic(text: str) -> str:
    """A message without what is specific to one class, for counting."""
    text = re.sub(r'\[tool\.tsfix\.examples\."[^"]+"\]', "[...]", text)
    text = re.sub(r"\(\w+\.py line \d+\)|'[^']*'|\"[^\"]*\"|\b\d+\b", "_", text)
    return re.split(r"[;(]", text, maxsplit=1)[0].strip()[:130]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", nargs="+", default=list(PACKAGES), choices=PACKAGES)
    parser.add_argument("--under", default=None,
                        help="only classes of files under this path (e.g. asteroid/masknn)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N classes")
    parser.add_argument("--verify", action="store_true",
                        help="run tsfix with validation (and the configured models) instead of "
                             "--no-verify: rejected rewrites are left out of the copy")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per class")
    parser.add_argument("--chunk", type=int, default=60, help="classes per child process")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="child processes at once")
    parser.add_argument("--before-only", action="store_true", help="do not run tsfix")
    parser.add_argument("--strict-too", action="store_true",
                        help="also torch.export.export(strict=True), to compare")
    parser.add_argument("--keep", type=Path, default=None, help="keep the work folder here")
    parser.add_argument("--before-from", type=Path, default=None,
                        help="reuse the 'before' measurement of an earlier --json (its eager "
                             "outputs must still exist: run it with --keep)")
    args = parser.parse_args()

    if os.environ.get("TSFIX_SKIP_CORPUS") == "1":
        print("TSFIX_SKIP_CORPUS=1: the model zoo is not measured")
        return
    try:
        site = zoo.install()
    except zoo.ZooUnavailable as exc:
        sys.exit(f"zoo unavailable: {exc}")
    targets = top_level_classes(site, args.packages)
    if args.under:
        targets = [t for t in targets if t.path.startswith(args.under.rstrip("/") + "/")
                   or t.path == args.under]
    if args.limit is not None:
        targets = targets[:args.limit]
    tables = configured_examples()
    strict = [False, True] if args.strict_too else [False]
    work = Path(tempfile.mkdtemp(prefix="tsfix-zoo-export.")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"packages": args.packages, "limit": args.limit,
                           "strict": strict, "timeout": args.timeout}
    try:
        print(f"{len(targets)} top-level classes in {', '.join(args.packages)}; "
              f"torch.export.export(strict=False), {args.timeout:g} s per class", flush=True)
        t0 = time.perf_counter()
        reached, problems = reached_classes([site], tables, args.timeout)
        print(f"{len(reached)} classes called inside the {len(tables)} configured models"
              + "".join(f"\n  not run: {p}" for p in problems), flush=True)
        out["reached"] = reached
        before = load_before(args.before_from, targets) if args.before_from else {}
        if before:
            print(f"before: {len(before)} classes from {args.before_from}", flush=True)
        before.update(measure([t for t in targets if t.key not in before], [site], tables,
                              work / "outputs", reached=reached, timeout=args.timeout,
                              strict=strict,
                              chunk=args.chunk, jobs=args.jobs, label="before: "))
        branches = config_branch_classes(site, {t.path for t in targets})
        before_counts = counts(before, branches)
        out["before"] = {"counts": before_counts, "seconds": round(time.perf_counter() - t0),
                         "classes": {k: asdict(m) for k, m in before.items()}}
        if args.strict_too:
            compare_strict(before)
        after_counts = None
        if not args.before_only:
            tree = work / "tree"
            t1 = time.perf_counter()
            code, tail, report = apply_tsfix(site, args.packages, tree, args.jobs,
                                             verify=args.verify)
            files = report.get("files", [])
            rewritten = sorted(f["path"] for f in files if f.get("status") == "changed")
            lifts = {f"{f['path']}:{c['class_name']}": c["lifted"] for f in files
                     for c in f.get("classes", []) if c.get("lifted")}
            rules = Counter(c.get("rule") for f in files for c in f.get("classes", []))
            flag = "" if args.verify else " --no-verify"
            print(f"\ntsfix apply --target export{flag}: exit code {code}, "
                  f"{time.perf_counter() - t1:.0f} s, {len(rewritten)} files rewritten")
            print("rewritten classes by rule: "
                  + (", ".join(f"{r} {n}" for r, n in rules.most_common()) or "none"))
            if code not in (0, 1) or not report:
                print(tail)
            print_refusals(files, {t.key for t in targets})
            out["tsfix"] = {"exit_code": code, "tail": tail, "rewritten": rewritten,
                            "summary": report.get("summary"), "lifted": lifts}
            t2 = time.perf_counter()
            compare = {k: m.record["saved"] for k, m in before.items() if "saved" in m.record}
            params = {k: m.record["forward_params"] for k, m in before.items()
                      if "forward_params" in m.record}
            # The report's {attribute: parameter} of each lifted class, else the parameters
            # forward gained (a helper-threaded setting shows only there).
            measured = [t for t in targets if before[t.key].status in (EXPORTS, FAILS)]
            after = {k: m for k, m in before.items() if m.status not in (EXPORTS, FAILS)}
            after.update(measure(measured, [tree, site], tables, work / "outputs-after",
                                 reached=reached, timeout=args.timeout, strict=[False],
                                 chunk=args.chunk, jobs=args.jobs, compare=compare,
                                 original_params=params, lifts=lifts, label="after: "))
            for key, m in after.items():
                if before[key].status in (EXPORTS, FAILS) and m.status == NO_EXAMPLE:
                    m.status = FAILS
                    where, _, line = str(m.record.get("where", "")).partition(": ")
                    m.record["export"] = {"ok": False, "cause": BROKEN, "head": m.detail,
                                          "where": where, "line": line}
            after_branches = config_branch_classes(tree, {t.path for t in targets})
            after_counts = counts(after, after_branches)
            out["after"] = {"counts": after_counts, "seconds": round(time.perf_counter() - t2),
                            "classes": {k: asdict(m) for k, m in after.items()}}
        print_table(before_counts, after_counts)
        if after_counts is not None:
            print_changes(before, after, branches, after_branches)
        print_blockers(after if after_counts is not None else before, top=3)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1, default=str) + "\n",
                                 encoding="utf-8")
            print(f"\nresults in {args.json}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"\nkept in {work}")


def load_before(path: Path, targets: Sequence[Target]) -> dict[str, Measured]:
    """The 'before' records of an earlier run for the classes of ``targets``."""
    data = json.loads(path.read_text(encoding="utf-8"))["before"]["classes"]
    wanted = {t.key: t for t in targets}
    return {key: Measured(wanted[key], m["status"], m["detail"], m["record"])
            for key, m in data.items() if key in wanted}


def compare_strict(results: dict[str, Measured]) -> None:
    both = [m for m in results.values() if "strict" in m.record and "export" in m.record]
    agree = sum(m.record["strict"]["ok"] == m.record["export"]["ok"] for m in both)
    only_non = [m.target.key for m in both if m.record["export"]["ok"]
                and not m.record["strict"]["ok"]]
    only_strict = [m.target.key for m in both if m.record["strict"]["ok"]
                   and not m.record["export"]["ok"]]
    print(f"\nstrict=True vs strict=False: same verdict for {agree}/{len(both)}; "
          f"only non-strict exports {len(only_non)}, only strict exports {len(only_strict)}")
    for key in (only_non + only_strict)[:8]:
        m = results[key]
        print(f"  {key}: strict {m.record['strict'].get('head', 'ok')[:100]} | "
              f"non-strict {m.record['export'].get('head', 'ok')[:100]}")


def print_refusals(files: list[dict[str, Any]], keys: set[str]) -> None:
    """Why lift-branch and the other export rules left sites of the measured classes."""
    reasons = Counter(_generic(s.get("reason", "")) for f in files for s in f.get("skips", [])
                      if f"{f['path']}:{s.get('class_name')}" in keys)
    if reasons:
        print("sites left by the rules, by reason:")
        for reason, n in reasons.most_common(6):
            print(f"  {n:4d}  {reason[:120]}")


def print_changes(before: dict[str, Measured], after: dict[str, Measured],
                  branches: dict[str, list[str]], after_branches: dict[str, list[str]]) -> None:
    print("\nclasses that changed:")
    changed = 0
    for key in sorted(after):
        b, a = before[key], after[key]
        was = b.status + (" (bakes)" if b.status == EXPORTS and key in branches else "")
        now = a.status + (" (bakes)" if a.status == EXPORTS and key in after_branches else "")
        lifted = a.record.get("lifted")
        if was == now and not lifted and a.record.get("eager_parity") in (None, "same"):
            continue
        changed += 1
        extra = ""
        if lifted:
            extra = (f"; lifted {lifted.get('settings')}: exports {lifted.get('exports')}, "
                     f"one program {lifted.get('one_program')} {lifted.get('checked', '')}")
        if a.record.get("eager_parity") not in (None, "same"):
            extra += f"; eager vs original: {a.record['eager_parity']}"
        if a.status == FAILS:
            extra += f"; {a.record.get('export', {}).get('head', '')[:100]}"
        print(f"  {key}: {was} -> {now}{extra}")
    if not changed:
        print("  none")


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child_main()
    else:
        main()
