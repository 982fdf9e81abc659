"""Runs validation jobs in worker processes; this side never imports torch.

Each worker (:mod:`tsfix.codemods.validation_worker`) imports torch once and takes jobs one at
a time over a pipe. A job that outlives its timeout, or a worker that dies (segfault, out of
memory, ``os._exit`` in user code), costs only that job: its classes become ``unverified`` with
the reason, the worker is replaced, and the run goes on.
"""

from __future__ import annotations

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

WORKER_MODULE = "tsfix.codemods.validation_worker"
STARTUP_TIMEOUT = 300.0   # importing torch on a loaded machine


@dataclass
class ValidationJob:
    id: int
    path: str
    source: str
    classes: list[dict[str, Any]]          # name, rule, lifted, example
    sys_path: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "path": self.path, "source": self.source,
                           "classes": self.classes, "sys_path": self.sys_path})


@dataclass
class ClassVerdict:
    name: str
    verdict: str        # verified | rejected | unverified
    reason: str
    duration_s: float = 0.0


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


def run_jobs(jobs: Iterable[ValidationJob], *, workers: int, timeout: float,
             on_result: Callable[[ValidationJob, list[ClassVerdict]], None] | None = None
             ) -> dict[int, list[ClassVerdict]]:
    """Validate every job; returns job id -> verdicts, in no particular order of completion."""
    pending: queue.Queue[ValidationJob] = queue.Queue()
    for job in jobs:
        pending.put(job)
    total = pending.qsize()
    if total == 0:
        return {}
    workers = max(1, min(workers, total))
    threads_each = max(1, (os.cpu_count() or 1) // workers)
    results: dict[int, list[ClassVerdict]] = {}
    lock = threading.Lock()

    def drive() -> None:
        worker: _Worker | None = None
        while True:
            try:
                job = pending.get_nowait()
            except queue.Empty:
                break
            if worker is None or not worker.alive:
                worker = _Worker(threads_each)
            outcome = worker.run(job, timeout)
            verdicts = _verdicts(job, outcome)
            with lock:
                results[job.id] = verdicts
                if on_result is not None:
                    on_result(job, verdicts)
        if worker is not None:
            if worker.process.stdin is not None:
                worker.process.stdin.close()
            worker.stop()

    threads = [threading.Thread(target=drive, daemon=True) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _verdicts(job: ValidationJob, outcome: dict[str, Any] | str) -> list[ClassVerdict]:
    if isinstance(outcome, str):
        return [ClassVerdict(c["name"], "unverified", outcome) for c in job.classes]
    if "error" in outcome:
        last = str(outcome["error"]).strip().splitlines()[-1:]
        reason = f"internal validation error: {last[0] if last else 'unknown'}"
        return [ClassVerdict(c["name"], "unverified", reason) for c in job.classes]
    return [ClassVerdict(c["name"], c["verdict"], c["reason"], c.get("duration_s", 0.0))
            for c in outcome["classes"]]
