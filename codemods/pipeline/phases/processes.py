"""Where the phases' work runs: rewrites in this process or in spawn processes kept for the
run (:class:`Rewriters`), and a pool round driven from another thread with its answers
handled in this one (:func:`answered_here`).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.pipeline.settings import RewriteSettings

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor


# Below this many files, starting rewrite processes (each imports LibCST and black, ~0.5 s)
# costs more than it saves; unless the round's work is known to take longer than
# PARALLEL_MIN_SECONDS (a later round of large files: on ParityBench one file took 12.8 s at
# p90, and its rule-drop trials rewrote such files serially, one core busy, the others idle).
PARALLEL_MIN_FILES = 24
PARALLEL_MIN_SECONDS = 5.0
# Files per task sent to a rewrite process: large enough to amortise pickling, small enough
# to keep every process busy to the end and the progress display moving.
FILES_PER_TASK = 8

T = TypeVar("T")
R = TypeVar("R")


class Rewriters:
    """Where rewrites run: in this process, or in spawn processes started the first time a
    round is large enough (``PARALLEL_MIN_FILES``) and then kept for the run's later rounds
    (trials, final texts). A process that dies (killed, out of memory, or never started
    because the calling script has no ``if __name__ == "__main__":`` guard, which spawn
    re-runs) sends the round's unfinished work, and every later round, to this process."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._executor: ProcessPoolExecutor | None = None
        self._broken = False
        self.pids: set[int] = set()

    def __enter__(self) -> Rewriters:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self.session.processes = len(self.pids - {os.getpid()})

    def map(self, work: Callable[[T, RewriteSettings], R], items: Sequence[T],
            done: Callable[[R], None], *, seconds: float = 0.0,
            together: Callable[[T], object] | None = None) -> list[R]:
        """``work(item, settings)`` for every item, in any order; ``done`` is called in this
        process as each result arrives. ``seconds``: what the items are expected to take
        here (the first round's times), which can make a short round worth the processes.
        ``together``: items with the same answer go to one process, in turn (rewrites of one
        file: each starts where the last left off, rewrite.STEPS)."""
        settings = self.session.settings
        small = len(items) < PARALLEL_MIN_FILES and seconds < PARALLEL_MIN_SECONDS
        if self._executor is None and (self._broken or self.session.workers <= 1
                                       or len(items) < 2 or small):
            return self._here(work, items, settings, done)
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from concurrent.futures.process import BrokenProcessPool

        if self._executor is None:
            # Processes stopped on Ctrl-C leave their queue's semaphores to multiprocessing's
            # resource tracker, which cleans them up and would say so on stderr after the
            # run's one interrupt message: the tracker (started with this pool, inheriting
            # the environment) is told to clean up silently.
            _quiet_resource_tracker()
            # spawn, not fork: the validation pool may already have threads and pipes open.
            self._executor = ProcessPoolExecutor(
                max_workers=self.session.workers, mp_context=multiprocessing.get_context("spawn"),
                initializer=_ignore_interrupts)
        results: dict[int, R] = {}
        # A few items per process at least four times over: a short round of large files
        # is spread one file per task, not left to one process.
        per_task = max(1, min(FILES_PER_TASK, len(items) // (4 * self.session.workers)))
        tasks = [list(range(start, min(start + per_task, len(items))))
                 for start in range(0, len(items), per_task)]
        if together is not None:
            groups: dict[object, list[int]] = {}
            for i, item in enumerate(items):
                groups.setdefault(together(item), []).append(i)
            tasks = list(groups.values())
        with _children_born_ignoring_interrupts():
            futures = {self._executor.submit(_work_batch, work, [items[i] for i in task],
                                             settings): task for task in tasks}
        try:
            for future in as_completed(futures):
                pid, answers = future.result()
                self.pids.add(pid)
                for i, answer in zip(futures[future], answers, strict=True):
                    results[i] = answer
                    done(answer)
        except BrokenProcessPool:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor, self._broken = None, True
            missing = [items[i] for i in range(len(items)) if i not in results]
            return [*results.values(), *self._here(work, missing, settings, done)]
        except BaseException:
            # Ctrl-C (or a failure here): the processes only compute, nothing of theirs is
            # written, so they are stopped rather than waited for (waiting at exit for
            # processes still importing their modules could hang the run).
            processes = list(getattr(self._executor, "_processes", {}).values())
            self._executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                with contextlib.suppress(Exception):
                    process.terminate()
            self._executor = None
            raise
        return list(results.values())

    def _here(self, work: Callable[[T, RewriteSettings], R], items: Sequence[T],
              settings: RewriteSettings, done: Callable[[R], None]) -> list[R]:
        self.pids.add(os.getpid())
        results = []
        for item in items:
            results.append(work(item, settings))
            done(results[-1])
        return results


def _work_batch(work: Callable[[T, RewriteSettings], R], items: list[T],
                settings: RewriteSettings) -> tuple[int, list[R]]:
    """One rewrite process's share: a few items, and the process that did them."""
    return os.getpid(), [work(item, settings) for item in items]


_QUIET_TRACKER = "ignore:resource_tracker:UserWarning"


def _quiet_resource_tracker() -> None:
    current = os.environ.get("PYTHONWARNINGS", "")
    if _QUIET_TRACKER not in current.split(","):
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [current, _QUIET_TRACKER]))


@contextlib.contextmanager
def _children_born_ignoring_interrupts() -> Iterator[None]:
    """Processes started in the block ignore Ctrl-C from birth: an ignored SIGINT survives
    fork and exec, and Python keeps it ignored, so a Ctrl-C while a rewrite process imports
    its modules prints no traceback from it (the initializer comes too late for that). The
    parent ignores it only while submitting, which starts the processes and returns (a few
    ms); the run's own interrupt handling is back before any work is waited for."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _ignore_interrupts() -> None:
    """Rewrite processes leave Ctrl-C to the parent, which stops the run; a traceback from
    every process would bury its message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def answered_here(run: Callable[[Callable[[T, R], None]], dict[int, R]],
                  each: Callable[[T, R], None]) -> dict[int, R]:
    """``run(on_result)`` (a pool round) in another thread, each result handed to ``each`` in
    this one as it arrives; returns what ``run`` returns. The pool calls ``on_result`` in its
    driver threads; a file decided by a result is written here, in the main thread, where
    a stop (Ctrl-C, SIGTERM, the time limit) is raised, so the files a stop lists as written
    are exactly those written (sources.interrupts_deferred)."""
    results: queue.SimpleQueue[tuple[T, R] | None] = queue.SimpleQueue()
    answer: dict[int, R] = {}
    failed: list[BaseException] = []

    def drive() -> None:
        try:
            answer.update(run(lambda job, result: results.put((job, result))))
        except BaseException as exc:        # re-raised in the calling thread
            failed.append(exc)
        finally:
            results.put(None)

    threading.Thread(target=drive, daemon=True, name="tsfix-pool-round").start()
    while (arrived := results.get()) is not None:
        each(*arrived)
    if failed:
        raise failed[0]
    return answer
