"""Runs validation jobs as Ray tasks (``--executor ray``, the ``ray`` extra; docs/cluster.md).

Each job is one Ray task (``num_cpus=1``, no retries) that runs it exactly as the local pool
runs one job: in a fresh ``python -m tsfix.codemods.validation.worker`` subprocess started by
:mod:`~tsfix.codemods.validation.pool`'s own code, stopped once it answered. So isolation and
wording are the local pool's: TorchScript's type registry, the model's imports and memory die
with the subprocess after every job; the job's timeout starts once torch is imported and stops
that job only (``validation timed out after ...``); a model that segfaults or calls
``os._exit`` kills the subprocess, not the Ray worker, and its verdict is the local pool's
``validation worker died: SIGSEGV ...`` with the model's function and line. What the local
pool cannot meet, a Ray worker lost under the task (its node died, Ray's memory monitor killed
it), is that job's ``validation worker died: ...`` with Ray's reason.

What travels: the job's JSON (the rewritten texts are in it), answered by the result's JSON.
Unchanged files of the tree are imported where the job names them (absolute paths): on one
machine and on a cluster whose nodes see the project at the same path (a shared file system,
or the same checkout path), nothing else travels. Otherwise ``ship=True`` uploads the project
folder (the pyproject.toml's folder) as Ray's ``runtime_env`` ``working_dir`` (Ray's limit:
512 MiB zipped, after excludes) and a task whose node does not have the folder at its path runs
the job against that copy, the paths in the job and in its answer mapped between the two.

Every job of a round is submitted at once; Ray runs as many as its nodes have CPUs (a local
instance started for the run has ``workers``, ``-j``, CPUs: the local pool's parallelism).
Ctrl-C (and a run stopped by SIGTERM or its time limit) cancels the tasks running and queued:
each running one's subprocess is killed. ``ray`` is imported
here only, when the first round has jobs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from tsfix.codemods.validation.executor import Executor, Outcome
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import Job, encode, job_from_json, result_from_json

__all__ = ["RayExecutor", "run_one"]

J = TypeVar("J", bound=Job)

# Settings the workers read from the environment travel with the tasks (a cluster's nodes
# have their own environment).
_FORWARDED = ("TSFIX_", "PYTHONHASHSEED")
# Not worth shipping to a cluster.
_EXCLUDES = [".git", "**/__pycache__", ".venv", "venv", "*.egg-info", "build", "dist",
             ".mypy_cache", ".ruff_cache", ".pytest_cache"]


def run_one(job_text: str, timeout: float, threads: int, root: str | None = None
            ) -> tuple[str, str]:
    """One job in a fresh worker subprocess, as the local pool runs it: ``("result", json)``
    or ``("reason", why there is none)``. Runs in a Ray worker. ``root``: the project folder
    as the driver sees it; when this node does not have it there but Ray shipped it (the
    task's working folder), the job runs against the copy."""
    from tsfix.codemods.validation.pool import _Worker

    here = _shipped_root(root)
    if here is not None and root is not None:
        job_text = _moved(job_text, root, here)
    worker = _Worker(threads)
    try:
        outcome = worker.run(job_from_json(json.loads(job_text)), timeout)
    finally:
        # The job is answered (or cancelled: Ctrl-C raises KeyboardInterrupt here): the
        # subprocess, with what the model left in it, goes.
        worker.stop()
    if isinstance(outcome, str):
        return "reason", outcome if here is None or root is None else \
            outcome.replace(here, root)
    answer = encode(outcome)
    if here is not None and root is not None:
        answer = _moved(answer, here, root)
    return "result", answer


def _shipped_root(root: str | None) -> str | None:
    """The folder to run against instead of ``root``: the task's working folder when ``root``
    is not on this node (Ray shipped it there), else None."""
    if root is None or os.path.isdir(root):
        return None
    here = os.getcwd()
    return here if here != root else None


def _moved(text: str, old: str, new: str) -> str:
    """``text`` (a job's or result's JSON) with the folder ``old`` as ``new`` in every path."""
    return text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])


def _unreachable(address: str, seconds: float = 10.0) -> str | None:
    """Why nothing answers at a ``host:port`` or ``ray://host:port`` address (None: something
    does, or the address names no port, as ``auto`` does)."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=seconds):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


class RayExecutor(WorkerPool):
    """The :class:`~tsfix.codemods.validation.executor.Executor` on Ray: connects (or starts
    a local Ray instance) when the first round has jobs, keeps the connection for the run.
    A :class:`WorkerPool` only for the methods it adds over ``run`` (``validate``,
    ``observe``, ``models``); it starts no local worker."""

    def __init__(self, workers: int, *, address: str | None = None,
                 root: Path | None = None, ship: bool = False) -> None:
        super().__init__(workers)
        self.address, self.root, self.ship = address, root, ship
        self._ray: Any = None
        self._task: Any = None
        self._started = False           # this run started Ray (and shuts it down)
        self._in_flight: set[Any] = set()

    def _connect(self) -> None:
        if self._task is not None:
            return
        from tsfix.codemods.pipeline.config import RAY_MISSING, ConfigError

        try:
            import ray
        except ImportError:
            raise ConfigError(RAY_MISSING) from None
        if not ray.is_initialized():
            env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED)}
            runtime_env: dict[str, Any] = {"env_vars": env} if env else {}
            if self.ship and self.root is not None:
                runtime_env.update(working_dir=str(self.root), excludes=_EXCLUDES)
            extra: dict[str, Any] = {}
            if self.address is None and not os.environ.get("RAY_ADDRESS"):
                # A local instance for this run: -j CPUs, as many jobs at once as the pool.
                extra.update(include_dashboard=False, num_cpus=self.workers)
            address = self.address or os.environ.get("RAY_ADDRESS")
            problem = _unreachable(address) if address else None
            if problem:
                # Ray would retry for minutes, printing its own warnings.
                raise ConfigError(f"cannot reach Ray at {address}: {problem}")
            try:
                ray.init(address=self.address, runtime_env=runtime_env or None,
                         logging_level=logging.ERROR, log_to_driver=False, **extra)
            except Exception as exc:
                # Not reachable, no cluster at RAY_ADDRESS, the tree too large to ship, ...
                at = f" at {self.address}" if self.address else ""
                last = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
                raise ConfigError(f"cannot start or reach Ray{at}: {last[0]}") from None
            self._started = True
        self._ray = ray
        self._task = ray.remote(num_cpus=1, max_retries=0)(run_one)

    def close(self, *, stop_running: bool = False) -> None:
        with self._lock:
            self._closed = self._closed or stop_running
            cancel = list(self._in_flight) if stop_running else []
        for ref in cancel:
            # Not force: the task gets KeyboardInterrupt and kills its subprocess.
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)
        if self._started:
            self._started = False
            with contextlib.suppress(Exception):
                self._ray.shutdown()

    def run(self, jobs: Iterable[J], *, timeout: float,
            on_result: Callable[[J, Outcome], None] | None = None) -> dict[int, Outcome]:
        """Every job's raw outcome, as :meth:`WorkerPool.run` gives it."""
        todo = list(jobs)
        if not todo:
            return {}
        self._connect()
        ray = self._ray
        root = str(self.root) if self.ship and self.root is not None else None
        by_ref: dict[Any, J] = {}
        results: dict[int, Outcome] = {}
        try:
            # Every job at once: Ray queues them and runs as many as the cluster has CPUs
            # (an autoscaler sees the demand); a job's timeout starts when it runs.
            for job in todo:
                if self._closed:
                    break
                ref = self._task.remote(encode(job), timeout, 1, root)
                by_ref[ref] = job
                self._in_flight.add(ref)
            # Ray's blocking calls turn any exception a signal handler raises into a plain
            # KeyboardInterrupt (the time limit's TimeLimitReached would become Ctrl-C): they
            # run in a thread of their own, and this one waits where Python sees signals.
            answers: queue.Queue[tuple[Any, Outcome] | BaseException] = queue.Queue()
            stop = threading.Event()
            threading.Thread(target=self._collect, args=(list(by_ref), answers, stop),
                             daemon=True).start()
            try:
                while by_ref:
                    try:
                        answer = answers.get(timeout=0.5)
                    except queue.Empty:
                        continue
                    if isinstance(answer, BaseException):
                        raise answer
                    ref, outcome = answer
                    job = by_ref.pop(ref)
                    self._in_flight.discard(ref)
                    results[job.id] = outcome
                    if on_result is not None:
                        on_result(job, outcome)
            finally:
                stop.set()
        except BaseException:
            # Ctrl-C, SIGTERM or the time limit: the tasks in flight and queued are cancelled
            # (the caller's close() does it again; cancelling twice is harmless).
            for ref in by_ref:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
            raise
        return results

    def _collect(self, refs: list[Any], answers: queue.Queue[tuple[Any, Outcome] | BaseException],
                 stop: threading.Event) -> None:
        """Puts each task's outcome on ``answers`` as it finishes (in a thread of its own)."""
        try:
            while refs and not stop.is_set():
                done, refs = self._ray.wait(refs, num_returns=1, timeout=0.5)
                for ref in done:
                    answers.put((ref, self._outcome(ref)))
        except BaseException as exc:
            answers.put(exc)

    def _outcome(self, ref: Any) -> Outcome:
        ray = self._ray
        try:
            kind, text = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return "validation cancelled"
        except ray.exceptions.OutOfMemoryError:
            return "validation worker died: killed by Ray's memory monitor (out of memory?)"
        except ray.exceptions.RayError as exc:
            # The Ray worker or its node is gone (the model runs in a subprocess of it).
            last = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
            return f"validation worker died: the Ray task failed: {last[0][:300]}"
        if kind == "reason":
            return str(text)
        return result_from_json(json.loads(text))


# The Ray executor is an executor (checked by mypy here).
_RAY_IS_AN_EXECUTOR: type[Executor] = RayExecutor
