"""Runs validation jobs in worker processes; this side never imports torch.

Each worker (:mod:`tsfix.codemods.validation.worker`) imports torch once and takes jobs one at
a time over a pipe. A job that outlives its timeout, or a worker that dies (segfault, out of
memory, ``os._exit`` in user code), costs only that job: its classes become ``unverified`` with
the reason, the worker is replaced, and the run goes on.

A :class:`WorkerPool` keeps its workers between rounds of jobs (observe, validate, re-validate
without one rule), so a run imports torch once per worker. Workers start only when a round has
jobs. Two kinds of job: ``validate`` (a rewritten file's classes, verdicts back) and ``observe``
(run the original file's examples eagerly, argument types back).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

WORKER_MODULE = "tsfix.codemods.validation.worker"
STARTUP_TIMEOUT = 300.0   # importing torch on a loaded machine
# How an ``unverified`` reason starts when the rewritten class does not script and neither did
# the original: the engine still looks for a rule to drop when several rules changed the class.
NOT_SCRIPTABLE_EITHER = "eager parity holds, but the class does not script before or after"


@dataclass
class ValidationJob:
    id: int
    path: str
    source: str                            # the rewritten file ("" for observe)
    classes: list[dict[str, Any]]          # name, rule, lifted, example (observe: name, example)
    sys_path: list[str] = field(default_factory=list)
    op: str = "validate"                   # validate | observe
    target: str = "torchscript"            # onnx: also export, check and run in onnxruntime

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "op": self.op, "path": self.path,
                           "source": self.source, "classes": self.classes,
                           "sys_path": self.sys_path, "target": self.target})


def observe_job(id: int, path: str, classes: list[dict[str, Any]],
                sys_path: list[str]) -> ValidationJob:
    """A job that runs the original file's examples and records argument types."""
    return ValidationJob(id, path, "", classes, sys_path, op="observe")


@dataclass
class ClassVerdict:
    name: str
    verdict: str        # verified | rejected | unverified
    reason: str
    duration_s: float = 0.0


@dataclass
class ObservedTypes:
    """What an observe job found: class -> method -> parameter or "return" -> type string, and
    for each class without observations, why."""

    types: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    # The job outlived its timeout: running the original's examples hangs (validation, which
    # runs them too, would only hang again).
    timed_out: str | None = None


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
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, job: ValidationJob, timeout: float) -> dict[str, Any] | str:
        """The worker's result, or a string saying why there is none."""
        assert self.process.stdin is not None
        if not self.ready:
            # Importing torch is not the model's time: the job's clock starts after it.
            started = self._next_line(STARTUP_TIMEOUT, "the validation worker did not start "
                                      f"within {STARTUP_TIMEOUT:g}s")
            if not isinstance(started, dict):
                return started
            self.ready = True
        try:
            self.process.stdin.write(job.to_json() + "\n")
            self.process.stdin.flush()
        except OSError:
            return self._death()
        return self._next_line(timeout, f"validation timed out after {timeout:g}s "
                                        "(a hang in the model?)")

    def _next_line(self, timeout: float, on_timeout: str) -> dict[str, Any] | str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            return on_timeout
        if line is None:
            return self._death()
        result: dict[str, Any] = json.loads(line)
        return result

    def _death(self) -> str:
        code = self.process.wait()
        self.log.seek(0)
        tail = self.log.read().decode("utf-8", "replace").strip().splitlines()[-1:]
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return f"validation worker died ({how}){': ' + tail[0] if tail else ''}"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

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
        self._lock = threading.Lock()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            if worker.process.stdin is not None:
                with contextlib.suppress(OSError):
                    worker.process.stdin.close()
            worker.stop()

    def run(self, jobs: Iterable[ValidationJob], *, timeout: float,
            on_result: Callable[[ValidationJob, dict[str, Any] | str], None] | None = None
            ) -> dict[int, dict[str, Any] | str]:
        """Every job's raw outcome: the worker's result, or a string saying why there is none."""
        pending: queue.Queue[ValidationJob] = queue.Queue()
        for job in jobs:
            pending.put(job)
        total = pending.qsize()
        if total == 0:
            return {}
        running = min(self.workers, total)
        threads_each = max(1, (os.cpu_count() or 1) // running)
        results: dict[int, dict[str, Any] | str] = {}

        def drive() -> None:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            while True:
                try:
                    job = pending.get_nowait()
                except queue.Empty:
                    break
                if worker is None or not worker.alive:
                    if worker is not None:
                        worker.stop()
                    worker = _Worker(threads_each)
                outcome = worker.run(job, timeout)
                with self._lock:
                    results[job.id] = outcome
                    if on_result is not None:
                        on_result(job, outcome)
            if worker is not None:
                if worker.alive:
                    with self._lock:
                        self._idle.append(worker)
                else:
                    worker.stop()

        threads = [threading.Thread(target=drive, daemon=True) for _ in range(running)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    def validate(self, jobs: list[ValidationJob], *, timeout: float,
                 on_result: Callable[[ValidationJob, list[ClassVerdict]], None] | None = None
                 ) -> dict[int, list[ClassVerdict]]:
        """Validate every job; returns job id -> verdicts."""
        def report(job: ValidationJob, outcome: dict[str, Any] | str) -> None:
            if on_result is not None:
                on_result(job, _verdicts(job, outcome))

        by_id = {job.id: job for job in jobs}
        outcomes = self.run(jobs, timeout=timeout, on_result=report if on_result else None)
        return {job_id: _verdicts(by_id[job_id], outcome)
                for job_id, outcome in outcomes.items()}

    def observe(self, jobs: list[ValidationJob], *, timeout: float,
                on_result: Callable[[ValidationJob], None] | None = None
                ) -> dict[int, ObservedTypes]:
        """Run observe jobs; returns job id -> the types seen (or why none were)."""
        by_id = {job.id: job for job in jobs}
        done = (lambda job, _: on_result(job)) if on_result is not None else None
        return {job_id: _observed(by_id[job_id], outcome)
                for job_id, outcome in self.run(jobs, timeout=timeout, on_result=done).items()}


def run_jobs(jobs: Iterable[ValidationJob], *, workers: int, timeout: float,
             on_result: Callable[[ValidationJob, list[ClassVerdict]], None] | None = None
             ) -> dict[int, list[ClassVerdict]]:
    """Validate every job in a pool of its own; returns job id -> verdicts."""
    with WorkerPool(workers) as pool:
        return pool.validate(list(jobs), timeout=timeout, on_result=on_result)


def _verdicts(job: ValidationJob, outcome: dict[str, Any] | str) -> list[ClassVerdict]:
    if isinstance(outcome, str):
        return [ClassVerdict(c["name"], "unverified", outcome) for c in job.classes]
    if "error" in outcome:
        reason = f"internal validation error: {_last_line(outcome['error'])}"
        return [ClassVerdict(c["name"], "unverified", reason) for c in job.classes]
    return [ClassVerdict(c["name"], c["verdict"], c["reason"], c.get("duration_s", 0.0))
            for c in outcome["classes"]]


def _observed(job: ValidationJob, outcome: dict[str, Any] | str) -> ObservedTypes:
    if isinstance(outcome, str):
        reason = outcome.replace("validation worker", "worker").replace(
            "validation timed out", "timed out")
        return ObservedTypes(failures={c["name"]: reason for c in job.classes},
                             timed_out=reason if reason.startswith("timed out") else None)
    if "error" in outcome:
        reason = f"internal observation error: {_last_line(outcome['error'])}"
        return ObservedTypes(failures={c["name"]: reason for c in job.classes})
    return ObservedTypes(outcome.get("observed", {}), outcome.get("failures", {}))


def _last_line(text: object) -> str:
    last = str(text).strip().splitlines()[-1:]
    return last[0] if last else "unknown"
