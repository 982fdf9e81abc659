"""The phases of a run over the files the cache could not answer: observe, rewrite, validate,
rule-drop trials, final texts, models (:mod:`~tsfix.codemods.pipeline.engine`'s docstring tells
the whole run). Each phase is a function from the records of the phases before it
(:mod:`.records`) to new frozen records, in a module of its own: :mod:`.observe`,
:mod:`.rewriting`, :mod:`.validate`, :mod:`.trials`, :mod:`.finals`, :mod:`.recheck`,
:mod:`.model_verdicts` (with :mod:`.fix_loop` and :mod:`.explain`); :mod:`.session` holds what
every phase needs, :mod:`.processes` where rewrites run. :func:`run_phases` chains them and
hands each file's outcome to the engine, which writes it. Importing this package loads neither
LibCST nor black: the rules are loaded when a file is first rewritten
(:meth:`~.session.RewriteSettings.rewrite`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases import finals
from tsfix.codemods.pipeline.phases.model_verdicts import Models, verdicts_on_final_tree
from tsfix.codemods.pipeline.phases.observe import observed_files
from tsfix.codemods.pipeline.phases.processes import Rewriters
from tsfix.codemods.pipeline.phases.recheck import recheck_not_checked
from tsfix.codemods.pipeline.phases.records import (
    Checked,
    File,
    Final,
    Observed,
    Outcome,
    Pending,
    Rewritten,
)
from tsfix.codemods.pipeline.phases.rewriting import rewrite_all
from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.pipeline.phases.state import RunState
from tsfix.codemods.pipeline.phases.trials import drop_rules, trials_of
from tsfix.codemods.pipeline.phases.validate import validate_all
from tsfix.codemods.pipeline.report import UNVERIFIED, FileResult
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import ClassVerdict

__all__ = ["File", "Outcome", "Session", "run_phases"]


def run_phases(todo: list[File], session: Session) -> tuple[dict[int, Outcome], list[Outcome]]:
    """Every phase over ``todo``; returns each file's outcome by its index, and the outcomes
    of files the fix loop rewrote (not among ``todo``). Nothing is written here: a file's
    outcome goes to ``session.decided`` as soon as it is known (:class:`_Decisions`)."""
    observed: dict[int, Observed] = {}
    rewritten: dict[int, Rewritten] = {}
    final_by_index: dict[int, Final] = {}
    decisions = _Decisions(session, lambda file, final: _outcome(
        file, rewritten[file.index], observed, final or final_by_index.get(file.index)))
    models = configured.configured_models(todo, session) if session.verify else []
    observations = configured.Observations()
    found_models = Models()
    # Validation workers start only when a round has jobs; with verify=False none runs.
    with _executor(session) as pool, Rewriters(session) as rewriters:
        if models and any(rule.needs_observations for rule in session.rules):
            observations = configured.observe(models, session, pool)
            observed = observed_files(todo, models, observations)
        rewritten = rewrite_all(todo, observed, session, rewriters)
        by_index = {file.index: file for file in todo}
        pending = [Pending(by_index[r.index], r.source, r.text, r.classes,
                           observed.get(r.index, Observed()), r.rewrite_s)
                   for r in rewritten.values() if r.status == "changed" and r.source]
        if not models:
            # No model's verdict to wait for: a file the rules did not change is decided.
            decisions.tell(file for file in todo if rewritten[file.index].status != "changed")
        state = RunState(todo, session, pool, rewriters, models, observations, pending)
        if session.verify:
            validate_all(state, ready=lambda item, check: _decide_early(
                item, check, session, rewriters, decisions))
            state.drops = drop_rules(pending, state.checked, session, pool, rewriters)
        else:
            state.checked = {item.index: Checked({c.class_name: ClassVerdict(
                c.class_name, UNVERIFIED, "not validated (--no-verify)")
                for c in item.classes}) for item in pending}
        checked, validated = state.checked, state.validated
        final_by_index = state.finals = finals.final_texts(
            pending, checked, state.drops, session, rewriters,
            recheck=bool(models) and session.verify)
        if models and session.verify:
            final_by_index = state.finals = recheck_not_checked(state)
        # Every final text is known; a file no model reaches has nothing left to wait for.
        reached = {path for model in models for path in (
            str(model.file.resolved), *(validated[model.display].files
                                         if model.display in validated else ()))}
        decisions.tell(file for file in todo if str(file.resolved) not in reached)
        if models:
            found_models = verdicts_on_final_tree(state, answered=lambda held: decisions.tell(
                (file for file in todo if str(file.resolved) not in held), complete=False))
    for index, (final, source) in found_models.finals.items():
        # A file of the run the repair loop rewrote (or whose verdicts its model measured
        # again): decided now, again when it was decided while the models ran (its text
        # then, the run's, was written whole; now the loop's is).
        final_by_index[index] = final
        if rewritten[index].source is None:
            rewritten[index] = replace(rewritten[index], source=source)
    decisions.tell((by_index[index] for index in found_models.finals), complete=False,
                   again=True)
    outcomes = {}
    for file in todo:
        outcome = _outcome(file, rewritten[file.index], observed, final_by_index.get(file.index))
        result = replace(outcome.result, models=found_models.records.get(file.index, []),
                         depends=dict.fromkeys(sorted(found_models.depends.get(file.index,
                                                                               ())), ""))
        outcomes[file.index] = replace(outcome, result=result)
    return outcomes, found_models.extra


def _executor(session: Session) -> WorkerPool:
    """Where the run's validation jobs go: local worker processes, or Ray tasks
    (``session.executor == "ray"``; ray is imported only then, on the first round with jobs).
    Connected to a cluster by address (``ray-address``, ``RAY_ADDRESS``), the project folder
    travels to nodes that do not have it at its path (docs/cluster.md)."""
    if session.executor == "ray":
        import os

        from tsfix.codemods.validation.ray_executor import RayExecutor

        return RayExecutor(session.workers, address=session.ray_address,
                           root=session.config.root,
                           ship=bool(session.ray_address or os.environ.get("RAY_ADDRESS")))
    return WorkerPool(session.workers)


def _outcome(file: File, rewritten: Rewritten, observed: Mapping[int, Observed],
             final: Final | None) -> Outcome:
    """A file's outcome from the phases, before the model phase adds its records."""
    result, text = _file_result(file.path, file.display, rewritten,
                                observed.get(file.index, Observed()), final)
    return Outcome(result, text, rewritten.source)


class _Decisions:
    """Tells ``session.decided`` each file's outcome once, when the run has decided it.

    A file counts as decided when its final text and the verdicts of its classes are known
    and no later phase can change them:

    - a file the rules did not change, or that failed: once rewritten, when no configured
      model is in the run; else once every final text is known (below);
    - a changed file, while the models still run (:func:`_decide_early`): every model that
      may reach it answered, no class of it waits for a guessed example or for a model's
      recheck, and no rule-drop trial can change it (:func:`validate_all`'s ``ready``);
    - every other file once every final text is known, when no model reaches it;
    - the rest when every model has its verdict on the final texts.

    Only a file no model reaches is complete when decided (the model phase adds records and
    imports to the others); the engine caches only complete outcomes before the run's end."""

    def __init__(self, session: Session,
                 outcome: Callable[[File, Final | None], Outcome]) -> None:
        self.session, self.outcome = session, outcome
        self.told: set[int] = set()

    def tell(self, files: Iterable[File], *, complete: bool = True,
             finals: Mapping[int, Final] | None = None, again: bool = False) -> None:
        """``complete``: no model reaches these files (nothing will be added to them).
        ``finals``: their final texts, known before the phase that computes them all.
        ``again``: also the files told before (the repair loop changed them since)."""
        if self.session.decided is None:
            return
        ready = [file for file in files if again or file.index not in self.told]
        self.told.update(file.index for file in ready)
        if ready:
            self.session.decided({file.index: self.outcome(file, (finals or {}).get(file.index))
                                  for file in ready}, complete)


def _decide_early(item: Pending, check: Checked, session: Session, rewriters: Rewriters,
                  decisions: _Decisions) -> None:
    """A changed file whose verdicts are final while models still run: decided now, unless
    a rule-drop trial may change it. Its final text is the one :func:`final_texts` gives at
    the end of the phases (the same verdicts and no drop), computed without progress lines
    (the display is showing the models)."""
    if session.decided is None or trials_of(item, check, session):
        return
    quiet = replace(session, progress=None)
    known = finals.final_texts([item], {item.index: check}, {}, quiet, rewriters)
    decisions.tell([item.file], complete=False, finals=known)


def _file_result(path: Path, display: str, rewritten: Rewritten, observed: Observed,
                 final: Final | None) -> tuple[FileResult, str | None]:
    """A file's result once every phase is over, and its new text when it changed."""
    notes, types = list(observed.notes), observed.types
    base = FileResult(path, display, rewritten.status, rewritten.error,
                      skips=list(rewritten.skips), notes=notes, observed=types,
                      rewrite_s=rewritten.rewrite_s)
    if final is None:
        return base, None
    text = final.text if final.status == "changed" else None
    diff = ""
    if text is not None:
        from tsfix.codemods.pipeline.rewrite import unified_diff

        assert rewritten.source is not None
        diff = unified_diff(rewritten.source.text, text, display)
    return replace(base, status=final.status, error=final.error, classes=list(final.classes),
                   diff=diff, new_text=text), text
