"""Runs validation jobs in worker processes; this side never imports torch.

Each worker (:mod:`tsfix.codemods.validation.worker`) imports torch once and takes jobs one at
a time over a pipe. A job that outlives its timeout, or a worker that dies (segfault, out of
memory, ``os._exit`` in user code), costs only that job: its classes become ``unverified`` with
the reason, the worker is replaced, and the run goes on. A death is told as the signal (SIGSEGV,
SIGABRT, SIGKILL: out of memory?) or exit code, the model's function and line from the stack
faulthandler prints in the worker, and the last line that job printed (only that job's: the
worker's stderr is read from where the job began).

A :class:`WorkerPool` keeps its workers between rounds of jobs (observe, validate, re-validate
without one rule), so a run imports torch once per worker. Workers start only when a round has
jobs. Three kinds of job: ``validate`` (a rewritten file's classes, verdicts back), ``observe``
(run the original file's examples eagerly, argument types back) and ``model`` (a configured model
built from the original tree and from the tree as tsfix leaves it: types, per-class verdicts and
the model verdict back). The pool is an :class:`~tsfix.codemods.validation.executor.Executor`:
the pipeline needs no more of it than ``run``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, TypeVar

from tsfix.codemods.validation import executor
from tsfix.codemods.validation.executor import (
    Executor,
    ObservedTypes,
    Outcome,
    model_result_of,
    observed_of,
    verdicts_of,
)
from tsfix.codemods.validation.protocol import (
    NOT_SCRIPTABLE_EITHER,
    ClassVerdict,
    Job,
    JobClass,
    ModelJob,
    ModelResult,
    ObserveClass,
    ObserveJob,
    ValidationJob,
    encode,
    result_from_json,
)

__all__ = ["NOT_SCRIPTABLE_EITHER", "ClassVerdict", "Executor", "JobClass", "ModelJob",
           "ModelResult", "ObserveClass", "ObserveJob", "ObservedTypes", "Outcome",
           "ValidationJob", "WorkerPool", "model_result_of", "observed_of", "run_jobs",
           "verdicts_of"]

WORKER_MODULE = "tsfix.codemods.validation.worker"
STARTUP_TIMEOUT = 300.0   # importing torch on a loaded machine
OUTPUT_TAIL = 65536       # bytes of a dead worker's last job's output looked at

# A worker's memory grows with the jobs it runs: TorchScript keeps every type and function it
# compiled (and through them the user's classes and modules), and the models' imports leave
# caches behind. A worker grown by more than this since it was ready is replaced after its
# job (a new one imports torch again: seconds), so memory does not grow with the run.
MAX_GROWTH_MB = float(os.environ.get("TSFIX_WORKER_MAX_GROWTH_MB", "1024"))

J = TypeVar("J", bound=Job)


def resident_mb(pid: int) -> float | None:
    """A process's resident memory in MB (None where /proc cannot tell: not Linux, gone).
    Read as bytes: it runs in the pool's threads, which must not import anything (a text
    file's codec is imported on first use, and a Ctrl-C that lands in the main thread's
    import can leave the import lock held: the thread then waited for it forever)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class _Worker:
    def __init__(self, threads: int) -> None:
        env = dict(os.environ, TSFIX_WORKER_THREADS=str(threads), PYTHONUNBUFFERED="1",
                   PYTHONDONTWRITEBYTECODE="1")
        self.log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, env=env, text=True, encoding="utf-8")
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.ready = False
        self.ready_mb: float | None = None      # resident memory once torch was imported
        # Where the current job's output starts in the log: a crash quotes only its own.
        self.job_output = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, job: Job, timeout: float) -> Outcome:
        """The worker's result, or a string saying why there is none."""
        assert self.process.stdin is not None
        if not self.ready:
            # Importing torch is not the model's time: the job's clock starts after it.
            started = self._next_line(STARTUP_TIMEOUT, "the validation worker did not start "
                                      f"within {STARTUP_TIMEOUT:g}s")
            if started is not None:
                return started if isinstance(started, str) else \
                    "the validation worker answered before it was ready"
            self.ready = True
            self.ready_mb = resident_mb(self.process.pid)
        self.job_output = os.fstat(self.log.fileno()).st_size
        try:
            self.process.stdin.write(encode(job) + "\n")
            self.process.stdin.flush()
        except OSError:
            return self._death()
        answer = self._next_line(timeout, f"validation timed out after {timeout:g}s "
                                          "(a hang in the model?)")
        return answer if answer is not None else "the validation worker said it was ready twice"

    def _next_line(self, timeout: float, on_timeout: str) -> Outcome | None:
        """The next result (None: the ready line), or why there is none."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            return on_timeout
        if line is None:
            return self._death()
        data = json.loads(line)
        return None if data.get("ready") else result_from_json(data)

    def _death(self) -> str:
        code = self.process.wait()
        end = os.fstat(self.log.fileno()).st_size
        start = max(self.job_output, end - OUTPUT_TAIL)
        output = os.pread(self.log.fileno(), end - start, start).decode("utf-8", "replace")
        return death_reason(code, output)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def grown(self) -> bool:
        """Grown by more than ``MAX_GROWTH_MB`` since it was ready: time to replace it."""
        now = resident_mb(self.process.pid)
        return self.ready_mb is not None and now is not None and \
            now - self.ready_mb > MAX_GROWTH_MB

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.log.close()


class WorkerPool:
    """Up to ``workers`` worker processes, started on demand and kept between rounds."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._closed = False
        self._lock = threading.Lock()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(stop_running=exc_type is not None)

    def close(self, *, stop_running: bool = False) -> None:
        """Stop the idle workers; ``stop_running``: the busy ones too, and start no more jobs
        (the run was stopped: Ctrl-C reaches the workers, SIGTERM and the time limit do not,
        and a job left running would outlive the run by up to its timeout)."""
        with self._lock:
            idle, self._idle = self._idle, []
            busy = list(self._busy) if stop_running else []
            self._closed = self._closed or stop_running
        for worker in busy:
            with contextlib.suppress(OSError):
                worker.process.kill()
        for worker in idle:
            if worker.process.stdin is not None:
                with contextlib.suppress(OSError):
                    worker.process.stdin.close()
            worker.stop()

    def run(self, jobs: Iterable[J], *, timeout: float,
            on_result: Callable[[J, Outcome], None] | None = None) -> dict[int, Outcome]:
        """Every job's raw outcome: the worker's result, or a string saying why there is none."""
        pending: queue.Queue[J] = queue.Queue()
        for job in jobs:
            pending.put(job)
        total = pending.qsize()
        if total == 0:
            return {}
        running = min(self.workers, total)
        threads_each = max(1, (os.cpu_count() or 1) // running)
        results: dict[int, Outcome] = {}
        # An error of on_result (the caller's code: a progress display whose stderr closed)
        # is raised here, not lost with its thread: the caller's other results would read as
        # "no answer from the worker".
        raised: list[BaseException] = []

        def drive() -> None:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            while not raised:
                try:
                    job = pending.get_nowait()
                except queue.Empty:
                    break
                if worker is None or not worker.alive:
                    if worker is not None:
                        worker.stop()
                    worker = _Worker(threads_each)
                with self._lock:
                    if self._closed:
                        break
                    self._busy.add(worker)
                outcome = worker.run(job, timeout)
                with self._lock:
                    self._busy.discard(worker)
                if worker.alive and worker.grown():
                    worker.stop()           # idle between jobs: nothing is lost
                    worker = None
                with self._lock:
                    results[job.id] = outcome
                    if on_result is not None and not raised:
                        try:
                            on_result(job, outcome)
                        except BaseException as exc:
                            raised.append(exc)
            if worker is not None:
                with self._lock:
                    keep = worker.alive and not self._closed
                    if keep:
                        self._idle.append(worker)
                if not keep:
                    worker.stop()

        threads = [threading.Thread(target=drive, daemon=True) for _ in range(running)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if raised:
            raise raised[0]
        return results

    def validate(self, jobs: Sequence[ValidationJob], *, timeout: float,
                 on_result: Callable[[ValidationJob, list[ClassVerdict]], None] | None = None
                 ) -> dict[int, list[ClassVerdict]]:
        """Validate every job; returns job id -> verdicts."""
        return executor.validate(self, jobs, timeout=timeout, on_result=on_result)

    def observe(self, jobs: Sequence[ObserveJob], *, timeout: float,
                on_result: Callable[[ObserveJob], None] | None = None
                ) -> dict[int, ObservedTypes]:
        """Run observe jobs; returns job id -> the types seen (or why none were)."""
        return executor.observe(self, jobs, timeout=timeout, on_result=on_result)

    def models(self, jobs: Sequence[ModelJob], *, timeout: float,
               on_result: Callable[[ModelJob, ModelResult], None] | None = None
               ) -> dict[int, ModelResult]:
        """Run model jobs; returns job id -> result (a timeout, a dead worker or an internal
        error is the result's ``failure``)."""
        return executor.models(self, jobs, timeout=timeout, on_result=on_result)


# The pool is an executor (checked by mypy here).
_POOL_IS_AN_EXECUTOR: type[Executor] = WorkerPool


def run_jobs(jobs: Iterable[ValidationJob], *, workers: int, timeout: float,
             on_result: Callable[[ValidationJob, list[ClassVerdict]], None] | None = None
             ) -> dict[int, list[ClassVerdict]]:
    """Validate every job in a pool of its own; returns job id -> verdicts."""
    with WorkerPool(workers) as pool:
        return pool.validate(list(jobs), timeout=timeout, on_result=on_result)


# What a signal that ended a worker means, in a verdict.
_SIGNALS = {"SIGSEGV": "segmentation fault", "SIGABRT": "abort", "SIGBUS": "bus error",
            "SIGFPE": "floating-point exception", "SIGILL": "illegal instruction",
            "SIGKILL": "killed: out of memory?"}
# faulthandler's report (the worker enables it): the error, then the crashing thread's stack.
_FATAL = re.compile(r"^Fatal Python error: ", re.MULTILINE)
_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+) in (\S+)', re.MULTILINE)


def death_reason(code: int, output: str) -> str:
    """Why a worker is gone: the signal (SIGSEGV, SIGABRT, SIGKILL, ...) or exit code; where
    in the model it happened (faulthandler's stack: the innermost frame of user code); and
    the last line the job itself printed before it (``output`` is only this job's)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"{name} ({_SIGNALS[name]})" if name in _SIGNALS else name
    else:
        how = f"exit code {code}"
    fatal = _FATAL.search(output)
    printed, report = (output[:fatal.start()], output[fatal.start():]) if fatal else (output, "")
    where = next((f" in {m.group(3)} at {_display(m.group(1))} line {m.group(2)}"
                  for m in _FRAME.finditer(_crashing_thread(report))
                  if not _installed_file(m.group(1))), "")
    last = [line.strip() for line in printed.splitlines() if line.strip()][-1:]
    said = f"; its last output: {last[0][:300]}" if last else ""
    return f"validation worker died: {how}{where}{said}"


def _crashing_thread(report: str) -> str:
    """faulthandler's stack of the thread that crashed ("Current thread ...")."""
    start = report.find("Current thread")
    if start < 0:
        return ""
    end = report.find("\n\n", start)
    return report[start:end if end >= 0 else len(report)]


def _display(file: str) -> str:
    path = Path(file)
    # The worker writes the rewritten file into a folder of its own (worker.Imports).
    if path.parent.name.startswith("tsfix-validate-"):
        return f"the rewritten {path.name}"
    return path.name


def _installation() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({str(Path(paths[key]).resolve()) + os.sep
                  for key in ("stdlib", "platstdlib", "purelib", "platlib")}
                 | {str(Path(__file__).resolve().parents[1]) + os.sep})


# Computed when the pool is imported, not in its threads: sysconfig imports its data module on
# first use (see resident_mb on why the threads must not import).
_INSTALLATION = _installation()


def _installed_file(file: str) -> bool:
    """A frame in the Python installation (torch, the standard library) or tsfix's own, or
    a frozen or generated one: not the model's code."""
    if file.startswith("<"):
        return True
    return str(Path(file).resolve()).startswith(_INSTALLATION)
