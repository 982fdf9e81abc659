"""The models phase: each configured model's verdict on the tree as the run leaves it, the fix
loop for the models that stop (:mod:`.fix_loop`) and what ``tsfix explain`` says about where
they stop (:mod:`.explain`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases.explain import explain_blockers, explain_key
from tsfix.codemods.pipeline.phases.finals import final_overlay
from tsfix.codemods.pipeline.phases.fix_loop import (
    LoopFile,
    LoopOutcome,
    LoopTree,
    model_stops,
    run_fix_loop,
)
from tsfix.codemods.pipeline.phases.records import Final, Outcome, Pending, by_class
from tsfix.codemods.pipeline.phases.state import RunState
from tsfix.codemods.pipeline.report import (
    REJECTED,
    VERIFIED,
    ClassResult,
    FileResult,
    ModelRecord,
)
from tsfix.codemods.pipeline.sources import SourceText
from tsfix.codemods.validation.protocol import (
    ClassVerdict,
    ModelResult,
)

if TYPE_CHECKING:

    pass


@dataclass(frozen=True)
class Models:
    """What the model phase adds to the run: each model file's records, the files each
    outcome depends on, and the files the fix loop rewrote."""

    records: dict[int, list[ModelRecord]] = field(default_factory=dict)
    depends: dict[int, set[str]] = field(default_factory=dict)
    extra: list[Outcome] = field(default_factory=list)
    # Files of the run the repair loop rewrote: by index, their final record and the file
    # as read (an unchanged file of the run has no such record before).
    finals: dict[int, tuple[Final, SourceText]] = field(default_factory=dict)


def verdicts_on_final_tree(state: RunState, answered: Callable[[set[str]], None] | None = None
                           ) -> Models:
    """Each configured model's verdict on the tree as the run leaves it, and the repair loop
    for a model that stops (models.py's docstring).
    ``answered``: called once every model has its verdict on the final texts, with the files
    the repair loop may still rewrite (those a model that stops imports); the others are
    final then."""
    overlay = final_overlay(state.pending, state.finals)
    results = _answers_on_final_texts(state, overlay)
    session = state.session
    failing = ([m for m in state.models if model_stops(results[m.display])]
               if session.fix_rounds else [])
    # The files a model that stops imports may be rewritten by the repair loop: they are
    # decided once it is over; the others now.
    held = {path for m in failing for path in (str(m.file.resolved),
                                                *results[m.display].files)}
    if answered is not None:
        answered(held)
    repair = _Repair(state, overlay)
    finished = repair.run(results, failing)
    out = Models()
    for model, result, _, _ in finished:
        for file in state.todo:
            if file.index == model.file.index or str(file.resolved) in result.files:
                out.depends.setdefault(file.index, set()).update(result.files)
    _add_records(state, finished, repair, out)
    _add_loop_files(state, repair, out)
    return out


def _answers_on_final_texts(state: RunState, overlay: Mapping[str, str]
                            ) -> dict[str, ModelResult]:
    """Each model's answer on the final texts: the one validation or the recheck phase gave
    when it ran on the same texts of the files the model imports, else a new model job."""
    validated_overlay = {str(item.file.resolved): item.text for item in state.pending}
    sources = {str(item.file.resolved): item.source.text for item in state.pending}
    results: dict[str, ModelResult] = {}
    again: list[configured.Configured] = []
    for model in state.models:
        known = state.validated.get(model.display)
        ran_on, last = state.rechecked.get(model.display, (None, None))
        if last is not None and ran_on is not None and last.failure is None and (
                carried := configured.carried_over(last, ran_on, overlay, sources.get)):
            results[model.display] = carried    # checked again on the final tree already
        elif (known is not None and known.failure is None and known.model is not None
                and (carried := configured.carried_over(known, validated_overlay, overlay,
                                                        sources.get))):
            # Nothing it imports was held back, or only code it cannot run.
            results[model.display] = carried
        elif known is not None and known.failure is not None:
            results[model.display] = known      # the original does not build or run
        else:
            again.append(model)
    if again:
        session = state.session
        report = session.reporter("models", len(again))
        answers = state.pool.models([configured.model_job(
            k, model, session, overlay=overlay, reads=configured.reads_of(
                state.validated.get(model.display)
                or state.observations.results.get(model.display)))
            for k, model in enumerate(again)],
            timeout=session.timeout, on_result=lambda *_: report())
        for k, model in enumerate(again):
            results[model.display] = answers.get(k) or ModelResult(
                k, failure="no answer from the worker")
    return {key: configured.located(found, overlay, state.session.target)
            for key, found in results.items()}


# A model's last answer, the loop's round lines, and the text of the file it stops in as
# its job saw it (a later loop may rewrite that file).
Finished = tuple[configured.Configured, ModelResult, list[str], str | None]


class _Repair:
    """The repair loops of the models that stop, over one tree of loop-rewritten files
    shared by every model (a model's repairs are the next model's starting point)."""

    def __init__(self, state: RunState, overlay: dict[str, str]) -> None:
        self.state, self.overlay = state, overlay
        # The run's rewrites the loop measures again when it rewrites their file (written).
        self.shared = LoopTree(
            state, overlay, run_files={str(file.resolved): file.display for file in state.todo},
            run_classes={str(item.file.resolved): [c for c in final.classes if c.written]
                         for item in state.pending
                         if (final := state.finals.get(item.index)) is not None
                         and final.status == "changed"})
        self.tree: dict[str, LoopFile] = self.shared.files
        self.run_files = self.shared.run_files
        self.loops: dict[str, LoopOutcome] = {}

    def run(self, results: Mapping[str, ModelResult], failing: list[configured.Configured]
            ) -> list[Finished]:
        """Every model's last answer, after the loops of those in ``failing``."""
        session = self.state.session
        fix_report = session.reporter("fix", len(failing)) if failing else None
        ran: list[tuple[configured.Configured, ModelResult, list[str]]] = []
        # The loops' texts of the files each model's last answer ran on.
        seen: dict[str, dict[str, str]] = {}
        for model in self.state.models:
            result = results[model.display]
            rounds: list[str] = []
            if model in failing:
                if _loop_texts(result, self.tree):
                    # An earlier model's repairs changed files this one imports.
                    result = self.again(model, result)
                if model_stops(result):
                    loop = run_fix_loop(self.shared, model, result, rounds)
                    self.loops[model.display] = loop
                    result = loop.result
                seen[model.display] = _loop_texts(result, self.tree)
                if fix_report is not None:
                    fix_report()
            ran.append((model, result, rounds))
        # A later model's repairs changed files these import: their verdicts are the tree's
        # as written, measured in one round of jobs (the loops are over: nothing they find
        # changes the tree again).
        stale = [k for k, (model, result, _) in enumerate(ran)
                 if _loop_texts(result, self.tree) != seen.get(model.display, {})]
        answers = dict(zip(stale, self.again_all([ran[k][:2] for k in stale]), strict=True))
        finished: list[Finished] = []
        for k, (model, result, rounds) in enumerate(ran):
            if k in answers:
                result = answers[k]
                rounds.append("checked again on the files the repair loop of another model "
                              "rewrote")
            blocker = configured.to_explain(result)
            text = None
            if blocker is not None and blocker.path is not None:
                loop_file = self.tree.get(blocker.path)
                text = loop_file.current if loop_file else self.overlay.get(blocker.path)
            finished.append((model, result, rounds, text))
        return finished

    def again(self, model: configured.Configured, result: ModelResult) -> ModelResult:
        """``model``'s answer on the tree as the loops so far leave it."""
        return self.again_all([(model, result)])[0]

    def again_all(self, stale: list[tuple[configured.Configured, ModelResult]]
                  ) -> list[ModelResult]:
        """Each of ``stale``'s models' answer on the tree as the loops so far leave it, in
        ``stale``'s order: one round of jobs, as many at once as there are workers (their
        time counts as the models phase's)."""
        if not stale:
            return []
        session = self.state.session
        texts = {**self.overlay, **{p: f.text for p, f in self.tree.items() if f.text}}
        report = session.reporter("models", len(stale)) if len(stale) > 1 else None
        answers = self.state.pool.models(
            [configured.model_job(k, model, session, overlay=texts,
                                  reads=configured.reads_of(result))
             for k, (model, result) in enumerate(stale)],
            timeout=session.timeout, on_result=(lambda *_: report()) if report else None)
        return [configured.located(answer, texts, session.target)
                if (answer := answers.get(k)) is not None
                else ModelResult(k, failure="no answer from the worker")
                for k in range(len(stale))]


def _add_records(state: RunState, finished: list[Finished], repair: _Repair, out: Models
                 ) -> None:
    """Each model's record (with what ``tsfix explain`` says where it stops) in ``out``."""
    display = {**repair.run_files, **{path: f.display for path, f in repair.tree.items()}}
    # `tsfix check` of a file takes about what rewriting it took.
    seconds = {str(item.file.resolved): item.rewrite_s for item in state.pending}
    # A rule whose rewrite of a class this run rejected is not the fix to recommend for it.
    rejected: dict[str, dict[str, dict[str, str]]] = {}
    for item in state.pending:
        for c in (final.classes if (final := state.finals.get(item.index)) is not None else ()):
            if c.verdict == REJECTED:
                rejected.setdefault(str(item.file.resolved), {}).setdefault(
                    c.class_name, {})[c.rule] = c.reason
    explanations = explain_blockers(finished, display, state.session, state.rewriters, seconds,
                                    rejected)
    for model, result, rounds, text in finished:
        blocker = configured.to_explain(result)
        explanation = None if blocker is None else explanations.get(explain_key(blocker, text))
        texts = {blocker.path: text} if blocker and blocker.path and text is not None else {}
        kept = repair.loops.get(model.display)
        record = configured.record_of(model, result, texts=texts, display=display,
                                      target=state.session.target, explanation=explanation)
        out.records.setdefault(model.file.index, []).append(replace(
            record, rounds=list(rounds),
            rewrites=_rewrites_reached(result, state.pending, state.finals),
            repairs=kept.repairs if kept else [],
            stopped=kept.stopped if kept and not record.ok else ""))


def _add_loop_files(state: RunState, repair: _Repair, out: Models) -> None:
    """The files the loops rewrote, and the run's files whose verdicts their last model jobs
    measured again, in ``out``: the verdicts of the loops' last model jobs, on the tree the
    loops leave (the one written), for the rewrites they measured: the run's, in the files
    those models import, and the loops' own."""
    measured = configured.merged_verdicts((m, done.result) for m, done in repair.loops.items()
                                          if done.repairs)
    for item in state.pending:
        final = state.finals.get(item.index)
        path = str(item.file.resolved)
        if final is not None and final.status == "changed" and path not in repair.tree and any(
                key[0] == path for key in measured):
            out.finals[item.index] = (replace(final, classes=tuple(
                _remeasured(path, list(final.classes), measured))), item.source)
    by_path = {str(item.file.resolved): item for item in state.pending}
    index_of = {str(file.resolved): file.index for file in state.todo}
    for path, loop_file in repair.tree.items():
        if not loop_file.text or loop_file.text == loop_file.source.text:
            continue
        loop_results = _remeasured(path, loop_file.results, measured)
        if loop_file.in_run:
            changed = by_path.get(path)
            final = state.finals.get(changed.index) if changed is not None else None
            run_results = _remeasured(path, list(final.classes) if final else [], measured)
            run_results, loop_results = _superseded(run_results, loop_results)
            out.finals[index_of[path]] = (Final("changed", (*run_results, *loop_results),
                                                text=loop_file.text), loop_file.source)
            continue
        from tsfix.codemods.pipeline.rewrite import unified_diff

        result_file = FileResult(Path(path), loop_file.display, "changed",
                                 classes=loop_results,
                                 diff=unified_diff(loop_file.source.text, loop_file.text,
                                                   loop_file.display),
                                 new_text=loop_file.text, fix_loop=True)
        out.extra.append(Outcome(result_file, loop_file.text, loop_file.source))


def _loop_texts(result: ModelResult, tree: Mapping[str, LoopFile]) -> dict[str, str]:
    """The loops' texts of the files ``result``'s model imports."""
    return {path: f.text for path, f in tree.items() if f.text and path in result.files}


def _rewrites_reached(result: ModelResult, pending: list[Pending],
                      finals: Mapping[int, Final]) -> list[str]:
    """The run's written rewrites of the classes the model holds, "file:Class rule+rule"."""
    found = []
    for item in pending:
        final = finals.get(item.index)
        reached = set(result.reached.get(str(item.file.resolved), ()))
        if final is None or final.status != "changed" or not reached:
            continue
        for name, group in by_class(c for c in final.classes if c.written).items():
            if name in reached:
                rules = "+".join(dict.fromkeys(c.rule for c in group))
                found.append(f"{item.file.display}:{name} {rules}")
    return found


def _superseded(run_results: list[ClassResult], loop_results: list[ClassResult]
                ) -> tuple[list[ClassResult], list[ClassResult]]:
    """A rewrite the run rejected or did not write that the loop made again, by the same rule
    on the same class from the run's text, is replaced by the loop's (which the model
    proved): the run's record goes, its reason becomes a note of the loop's."""
    redone = {(c.rule, c.class_name) for c in loop_results}
    replaced = {(c.rule, c.class_name): (f"rejected: {c.reason}" if c.verdict == REJECTED
                                         else f"not written: {c.reason or c.withheld}")
                for c in run_results if not c.written and (c.rule, c.class_name) in redone}
    if not replaced:
        return run_results, loop_results
    kept = [c for c in run_results if (c.rule, c.class_name) not in replaced or c.written]
    noted = [replace(c, notes=[*c.notes, f"replaces the run's rewrite of {c.class_name} by "
                                         f"{c.rule}, {why}"])
             if (why := replaced.get((c.rule, c.class_name))) is not None else c
             for c in loop_results]
    return kept, noted


def _remeasured(path: str, classes: list[ClassResult],
                measured: Mapping[tuple[str, str], ClassVerdict]) -> list[ClassResult]:
    """``classes`` of ``path`` with the verdicts the loops' last model jobs gave them on the
    tree the loops leave (the one written), where those prove more: verified. Any other
    measurement leaves the class's own verdict (a model that still stops, or a class that
    scripts further into its code now, proves nothing against it)."""
    verdicts = {name: v for (p, name), v in measured.items()
                if p == path and v.verdict == VERIFIED}
    # A rewrite left out of the text (rejected, withheld) was not measured.
    return [c if c.verdict == VERIFIED or not c.written else next(iter(
        configured.with_verdicts([c], verdicts))) for c in classes]
