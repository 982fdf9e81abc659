"""The executor interface: validation jobs in, outcomes out.

An :class:`Executor` runs :mod:`~tsfix.codemods.validation.protocol` jobs somewhere torch can
be imported and gives back, per job id, the worker's result or a string saying why there is
none (a timeout, a dead worker). :class:`~tsfix.codemods.validation.pool.WorkerPool` (local
worker processes) is one; :class:`~tsfix.codemods.validation.ray_executor.RayExecutor`
(``--executor ray``) ships the same JSON jobs to Ray tasks, each run by the pool's own code in
a fresh ``python -m tsfix.codemods.validation.worker`` subprocess. Neither touches the rules or
the pipeline: phases depend on this Protocol and the functions below only.

:func:`validate`, :func:`observe` and :func:`models` turn raw outcomes into what the pipeline
uses (verdicts, observed types, model results), so a missing answer becomes a verdict that says
why, whatever executor ran the job. This module imports neither torch nor LibCST.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from tsfix.codemods.validation.protocol import (
    UNVERIFIED,
    ClassVerdict,
    Job,
    JobFailure,
    ModelJob,
    ModelResult,
    ObservationResult,
    ObserveJob,
    Result,
    TypeTable,
    ValidationJob,
    ValidationResult,
)

__all__ = ["Executor", "ObservedTypes", "Outcome", "model_result_of", "models", "observe",
           "observed_of", "validate", "verdicts_of"]

# A job's raw outcome: the worker's result, or a string saying why there is none (timeout,
# worker death).
Outcome = Result | str
J = TypeVar("J", bound=Job)


class Executor(Protocol):
    """Runs jobs; returns job id -> outcome for every job it was given. ``on_result`` is
    called once per job as its outcome arrives (from any thread; the executor serialises the
    calls). A job must not outlive ``timeout`` seconds of its own run time."""

    def run(self, jobs: Iterable[J], *, timeout: float,
            on_result: Callable[[J, Outcome], None] | None = None) -> dict[int, Outcome]:
        ...


@dataclass(frozen=True)
class ObservedTypes:
    """What an observe job found: class -> method -> parameter or "return" -> type string, and
    for each class without observations, why."""

    types: TypeTable = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    # The job outlived its timeout: running the original's examples hangs (validation, which
    # runs them too, would only hang again).
    timed_out: str | None = None


def validate(executor: Executor, jobs: Sequence[ValidationJob], *, timeout: float,
             on_result: Callable[[ValidationJob, list[ClassVerdict]], None] | None = None
             ) -> dict[int, list[ClassVerdict]]:
    """Validate every job; returns job id -> verdicts."""
    def report(job: ValidationJob, outcome: Outcome) -> None:
        if on_result is not None:
            on_result(job, verdicts_of(job, outcome))

    by_id = {job.id: job for job in jobs}
    outcomes = executor.run(jobs, timeout=timeout, on_result=report if on_result else None)
    return {job_id: verdicts_of(by_id[job_id], outcome)
            for job_id, outcome in outcomes.items()}


def observe(executor: Executor, jobs: Sequence[ObserveJob], *, timeout: float,
            on_result: Callable[[ObserveJob], None] | None = None
            ) -> dict[int, ObservedTypes]:
    """Run observe jobs; returns job id -> the types seen (or why none were)."""
    by_id = {job.id: job for job in jobs}

    def done(job: ObserveJob, _: Outcome) -> None:
        if on_result is not None:
            on_result(job)

    return {job_id: observed_of(by_id[job_id], outcome)
            for job_id, outcome in executor.run(jobs, timeout=timeout, on_result=done).items()}


def models(executor: Executor, jobs: Sequence[ModelJob], *, timeout: float,
           on_result: Callable[[ModelJob, ModelResult], None] | None = None
           ) -> dict[int, ModelResult]:
    """Run model jobs; returns job id -> result (``failure`` says why there is none)."""
    def report(job: ModelJob, outcome: Outcome) -> None:
        if on_result is not None:
            on_result(job, model_result_of(job, outcome))

    by_id = {job.id: job for job in jobs}
    outcomes = executor.run(jobs, timeout=timeout, on_result=report if on_result else None)
    return {job_id: model_result_of(by_id[job_id], outcome)
            for job_id, outcome in outcomes.items()}


def verdicts_of(job: ValidationJob, outcome: Outcome) -> list[ClassVerdict]:
    """One verdict per class of ``job``: the worker's, or ``unverified`` with why there is
    none (timeout, worker death, an internal error)."""
    if isinstance(outcome, str):
        return [ClassVerdict(c.name, UNVERIFIED, outcome) for c in job.classes]
    if isinstance(outcome, JobFailure):
        reason = f"internal validation error: {last_line(outcome.error)}"
        return [ClassVerdict(c.name, UNVERIFIED, reason) for c in job.classes]
    if not isinstance(outcome, ValidationResult):
        reason = f"internal validation error: unexpected answer {type(outcome).__name__}"
        return [ClassVerdict(c.name, UNVERIFIED, reason) for c in job.classes]
    return list(outcome.classes)


def observed_of(job: ObserveJob, outcome: Outcome) -> ObservedTypes:
    if isinstance(outcome, str):
        reason = outcome.replace("validation worker", "worker").replace(
            "validation timed out", "timed out")
        return ObservedTypes(failures={c.name: reason for c in job.classes},
                             timed_out=reason if reason.startswith("timed out") else None)
    if isinstance(outcome, JobFailure):
        reason = f"internal observation error: {last_line(outcome.error)}"
        return ObservedTypes(failures={c.name: reason for c in job.classes})
    if not isinstance(outcome, ObservationResult):
        reason = f"internal observation error: unexpected answer {type(outcome).__name__}"
        return ObservedTypes(failures={c.name: reason for c in job.classes})
    return ObservedTypes(outcome.observed, dict(outcome.failures))


def model_result_of(job: ModelJob, outcome: Outcome) -> ModelResult:
    """The worker's result, or one whose ``failure`` says why there is none: the job timed out
    (``timed out after 60s ...``), the worker died (the signal and where), or an internal
    error (the traceback's last line)."""
    if isinstance(outcome, str):
        reason = outcome.replace("validation worker", "worker").replace(
            "validation timed out", "timed out")
        return ModelResult(job.id, failure=reason)
    if isinstance(outcome, JobFailure):
        return ModelResult(job.id, failure=f"internal model-job error: "
                                           f"{last_line(outcome.error)}")
    if not isinstance(outcome, ModelResult):
        return ModelResult(job.id, failure=f"internal model-job error: unexpected answer "
                                           f"{type(outcome).__name__}")
    return outcome


def last_line(text: object) -> str:
    last = str(text).strip().splitlines()[-1:]
    return last[0] if last else "unknown"
