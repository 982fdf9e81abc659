"""The validate phase: a verdict for every rewritten class, from its own example table, the
configured models that reach it, or a guessed example.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.config import Config, ExampleError, ExampleSpec
from tsfix.codemods.pipeline.phases.processes import answered_here
from tsfix.codemods.pipeline.phases.records import Checked, File, Pending, by_class, job_class
from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.pipeline.phases.state import RunState
from tsfix.codemods.pipeline.report import (
    REJECTED,
    UNVERIFIED,
    ClassResult,
    Phase,
)
from tsfix.codemods.validation.protocol import (
    NOT_CHECKED,
    ClassVerdict,
    JobClass,
    ModelJob,
    ModelResult,
    ValidationJob,
)

if TYPE_CHECKING:

    pass


@dataclass
class _Sorted:
    """The rewritten classes by how they are validated, by file index -> class -> their
    ClassResults: with a table of their own (the models check them too), or without one
    (the models' verdict, else a guessed example)."""

    tabled: dict[int, dict[str, list[ClassResult]]] = field(default_factory=dict)
    by_models: dict[int, dict[str, list[ClassResult]]] = field(default_factory=dict)


def validate_all(state: RunState, ready: Callable[[Pending, Checked], None] | None = None
                 ) -> None:
    """A verdict for every rewritten class: a class with its own example table is validated
    alone; the others from the configured models that hold instances of them (one model job
    each, over the whole rewritten tree); a class no model reaches is guessed
    (``auto-examples``) or unverified. Sets ``state.checked`` (the verdicts by file) and
    ``state.validated`` (each model job's answer by model: its model verdict is the final
    one when nothing is held back).

    ``ready`` gets a file's verdicts while other models still run, as soon as they are its
    final ones: every model that may reach the file has answered (a model whose observe job
    named the files it imports reaches only those: its job carries no others; any other
    model may reach every file until it answers), no class of the file waits for a guessed
    example, and no model said it could not check one of its classes (the recheck may
    still reject that class). Later answers cannot change them: see _EarlyVerdicts."""
    sorted_classes = _validate_tabled(state)
    reached: dict[tuple[str, str], ClassVerdict] = {}
    if state.models:
        _validate_by_models(state, sorted_classes, ready)
        reached = configured.merged_verdicts(state.validated.items())
    _validate_guessed(state, sorted_classes, reached)


def _validate_tabled(state: RunState) -> _Sorted:
    """The classes with an example table of their own, validated alone; the others sorted
    out for the models."""
    session, checked = state.session, state.checked
    jobs: list[ValidationJob] = []
    by_job: dict[int, int] = {}
    found = _Sorted()
    for item in state.pending:
        verdicts: dict[str, ClassVerdict] = {}
        classes: list[JobClass] = []
        error = None
        for name, group in by_class(item.classes).items():
            spec = session.config.example_for(item.file.resolved, name, resolved=True)
            if isinstance(spec, ExampleError):
                error = str(spec)
                break
            if spec is None:
                found.by_models.setdefault(item.index, {})[name] = group
                continue
            classes.append(job_class(name, group, spec))
            found.tabled.setdefault(item.index, {})[name] = group
        if error is not None:
            checked[item.index] = Checked(error=error)
            found.by_models.pop(item.index, None)
            found.tabled.pop(item.index, None)
            continue
        if classes and item.observed.timed_out:
            # Validation runs the same original examples first; do not wait for it twice.
            for c in classes:
                verdicts[c.name] = ClassVerdict(
                    c.name, UNVERIFIED, f"{item.observed.timed_out} while observing the "
                                        "original's examples; not validated")
        elif classes:
            job = ValidationJob(len(jobs), str(item.file.resolved), item.text, tuple(classes),
                                session.sys_path, target=session.target)
            jobs.append(job)
            by_job[job.id] = item.index
        checked[item.index] = Checked(verdicts)
    _run_validation(jobs, by_job, state, "validate")
    return found


def _validate_by_models(state: RunState, sorted_classes: _Sorted,
                        ready: Callable[[Pending, Checked], None] | None) -> None:
    """Every configured model's job over the whole rewritten tree: its verdict, and those of
    the rewritten classes it reaches."""
    session, checked = state.session, state.checked
    overlay = {str(item.file.resolved): item.text for item in state.pending
               if checked[item.index].error is None}
    # A class verified on its own table can still break a model that holds it with
    # other settings (ParityBench: Dropsample's lifted prob typed int from its default 0,
    # MBConvResidual builds it with 0.0 and no longer scripted): every model that reaches
    # a rewritten class judges it, and a rejection there rejects it.
    wanted = [configured.model_class(item.file.resolved, name, group)
              for item in state.pending
              for groups in (sorted_classes.by_models, sorted_classes.tabled)
              for name, group in groups.get(item.index, {}).items()]
    seen = state.observations.results
    reads = [configured.reads_of(seen.get(model.display)) for model in state.models]
    model_jobs = [configured.model_job(k, model, session, overlay=overlay, classes=wanted,
                                       reads=reads[k])
                  for k, model in enumerate(state.models)]
    report = session.reporter("models", len(model_jobs))
    early = _EarlyVerdicts(state, reads, sorted_classes, ready)

    def answered(job: ModelJob, answer: ModelResult) -> None:
        report()
        early.answered(job.id, answer)

    answers = answered_here(
        lambda on_result: state.pool.models(model_jobs, timeout=session.timeout,
                                            on_result=on_result), answered)
    for k, model in enumerate(state.models):
        state.validated[model.display] = answers.get(k) or ModelResult(
            k, failure="no answer from the worker")


def _validate_guessed(state: RunState, sorted_classes: _Sorted,
                      reached: Mapping[tuple[str, str], ClassVerdict]) -> None:
    """The models' verdicts joined in; the classes no model reached get a guessed example,
    else unverified with what to add."""
    session, checked, config = state.session, state.checked, state.session.config
    guessed: list[ValidationJob] = []
    by_guess: dict[int, int] = {}
    for item in state.pending:
        if checked[item.index].error is not None:
            continue
        checked[item.index], to_guess = _with_model_verdicts(
            item, checked[item.index], reached, sorted_classes.tabled.get(item.index, {}),
            sorted_classes.by_models.get(item.index, {}), config)
        classes = [job_class(name, group, ExampleSpec.automatic(
            f"{_example_key(item.file, config)}:{name}")) for name, group in to_guess.items()]
        if classes:
            job = ValidationJob(len(guessed), str(item.file.resolved), item.text,
                                tuple(classes), session.sys_path, target=session.target)
            guessed.append(job)
            by_guess[job.id] = item.index
    _run_validation(guessed, by_guess, state, "validate")


def _with_model_verdicts(item: Pending, check: Checked,
                         reached: Mapping[tuple[str, str], ClassVerdict],
                         tabled: Collection[str], left: Mapping[str, list[ClassResult]],
                         config: Config) -> tuple[Checked, dict[str, list[ClassResult]]]:
    """One file's verdicts with the models' (``reached``: merged, by path and class): a
    class with a table of its own that a model rejected is rejected; a class without one
    takes the models' verdict, else is returned to be guessed (``auto-examples``) or is
    unverified with what to add."""
    path = str(item.file.resolved)
    verdicts = dict(check.verdicts)
    for name in tabled:
        found = reached.get((path, name))
        if (found is not None and found.verdict == REJECTED and name in verdicts
                and verdicts[name].verdict != REJECTED):
            verdicts[name] = found
    to_guess: dict[str, list[ClassResult]] = {}
    for name, group in left.items():
        found = reached.get((path, name))
        if found is not None:
            verdicts[name] = found
        elif config.auto_examples:
            to_guess[name] = group
        else:
            where = _example_key(item.file, config)
            verdicts[name] = ClassVerdict(
                name, UNVERIFIED, f'no example inputs: add [tool.tsfix.examples."{where}:'
                                  f'{name}"] to {config.source or "pyproject.toml"}, or a '
                                  "table for a model that uses it")
    return Checked(verdicts, check.error), to_guess


class _EarlyVerdicts:
    """Gives ``ready`` each file's verdicts once no model job still running can change them
    (:func:`validate_all`'s docstring says when). They are the ones :func:`validate_all` returns:
    a model's answer judges only classes of the files it imports, and the merged verdict of
    a class comes from the models that judged it, in model order, whichever answered first."""

    def __init__(self, state: RunState, reads: Sequence[Collection[str] | None],
                 sorted_classes: _Sorted, ready: Callable[[Pending, Checked], None] | None
                 ) -> None:
        self.models, self.checked, self.ready = state.models, state.checked, ready
        self.config = state.session.config
        self.tabled, self.by_models = sorted_classes.tabled, sorted_classes.by_models
        pending, checked = state.pending, state.checked
        self.items = {item.index: item for item in pending
                      if checked[item.index].error is None}
        self.answers: dict[int, ModelResult] = {}
        self.judged: dict[str, set[int]] = {}       # path -> models that judged its classes
        # file index -> the models that may still judge its classes, and the reverse
        self.waiting: dict[int, set[int]] = {}
        self.blocks: dict[int, list[int]] = {k: [] for k in range(len(self.models))}
        if ready is None:
            return
        for index, item in self.items.items():
            path = str(item.file.resolved)
            self.waiting[index] = {k for k, files in enumerate(reads)
                                   if files is None or path in files}
            for k in self.waiting[index]:
                self.blocks[k].append(index)
        for index in [index for index, left in self.waiting.items() if not left]:
            self._decide(index)

    def answered(self, job_id: int, answer: ModelResult) -> None:
        if self.ready is None:
            return
        self.answers[job_id] = answer
        for found in answer.classes:
            self.judged.setdefault(found.path, set()).add(job_id)
        for index in self.blocks.pop(job_id, ()):
            left = self.waiting[index]
            left.discard(job_id)
            if not left:
                self._decide(index)

    def _decide(self, index: int) -> None:
        assert self.ready is not None
        item = self.items[index]
        path = str(item.file.resolved)
        judges = [(self.models[k].display, self.answers[k])
                  for k in sorted(self.judged.get(path, ()))]
        if any(found.path == path and found.verdict.reason.startswith(NOT_CHECKED)
               for _, answer in judges for found in answer.classes):
            return                  # recheck_not_checked may still reject that class
        check, to_guess = _with_model_verdicts(
            item, self.checked[index], configured.merged_verdicts(judges),
            self.tabled.get(index, {}), self.by_models.get(index, {}), self.config)
        if not to_guess:
            self.ready(item, check)


def _run_validation(jobs: list[ValidationJob], by_job: dict[int, int], state: RunState,
                    phase: Phase) -> None:
    """Run per-file validation jobs; their verdicts join ``state.checked`` (by file index)."""
    if not jobs:
        return
    report = state.session.reporter(phase, sum(len(job.classes) for job in jobs))
    found = state.pool.validate(jobs, timeout=state.session.timeout,
                                on_result=lambda _, found: report(
                                    len(found), verdicts=[v.verdict for v in found]))
    checked = state.checked
    for job_id, class_verdicts in found.items():
        index = by_job[job_id]
        checked[index] = Checked({**checked[index].verdicts,
                                  **{v.name: v for v in class_verdicts}})


def example_for(session: Session, file: File, name: str
                 ) -> ExampleSpec | ExampleError | None:
    """The configured example table, else (``auto-examples``) a guessed one (rule-drop
    trials)."""
    spec = session.config.example_for(file.resolved, name, resolved=True)
    if spec is None and session.config.auto_examples:
        return ExampleSpec.automatic(f"{_example_key(file, session.config)}:{name}")
    return spec


def _example_key(file: File, config: Config) -> str:
    """The file's part of an example table's name: relative to the configuration's folder."""
    if config.root and file.resolved.is_relative_to(config.root):
        return file.resolved.relative_to(config.root).as_posix()
    return file.display
