"""The models phase: each configured model's verdict on the tree as the run leaves it, the fix
loop for the models that stop (:mod:`.fix_loop`) and what ``tsfix explain`` says about where
they stop (:mod:`.explain`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases.explain import explain_blockers, explain_key
from tsfix.codemods.pipeline.phases.finals import final_overlay
from tsfix.codemods.pipeline.phases.fix_loop import LoopFile, model_stops, run_fix_loop
from tsfix.codemods.pipeline.phases.processes import Rewriters
from tsfix.codemods.pipeline.phases.records import File, Final, Outcome, Pending
from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.pipeline.report import (
    REJECTED,
    FileResult,
    ModelRecord,
)
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import (
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


def verdicts_on_final_tree(models: list[configured.Configured], todo: list[File],
                    pending: list[Pending], finals: dict[int, Final],
                    validated: dict[str, ModelResult],
                    observations: configured.Observations, session: Session,
                    pool: WorkerPool, rewriters: Rewriters,
                    rechecked: Mapping[str, tuple[dict[str, str], ModelResult]] | None = None,
                    answered: Callable[[], None] | None = None) -> Models:
    """Each configured model's verdict on the tree as the run leaves it, and the fix loop for
    a model that stops in a file of the tree outside the run (models.py's docstring).
    ``rechecked``: a model's answer on an overlay of its own (recheck_not_checked).
    ``answered``: called once every model has its verdict on the final texts (the fix loop
    and the explanations change only files outside the run, and the records)."""
    validated_overlay = {str(item.file.resolved): item.text for item in pending}
    overlay = final_overlay(pending, finals)
    results: dict[str, ModelResult] = {}
    again: list[configured.Configured] = []
    for model in models:
        known = validated.get(model.display)
        ran_on, last = (rechecked or {}).get(model.display, (None, None))
        if (last is not None and ran_on is not None and last.failure is None
                and configured.overlay_for(last.files, overlay)
                == configured.overlay_for(last.files, ran_on)):
            results[model.display] = last       # checked again on the final tree already
        elif (known is not None and known.failure is None and known.model is not None
                and configured.overlay_for(known.files, overlay)
                == configured.overlay_for(known.files, validated_overlay)):
            results[model.display] = known      # nothing it imports was held back
        elif known is not None and known.failure is not None:
            results[model.display] = known      # the original does not build or run
        else:
            again.append(model)
    if again:
        report = session.reporter("models", len(again))
        answers = pool.models([configured.model_job(
            k, model, session, overlay=overlay, reads=configured.reads_of(
                validated.get(model.display) or observations.results.get(model.display)))
            for k, model in enumerate(again)],
                              timeout=session.timeout, on_result=lambda *_: report())
        for k, model in enumerate(again):
            results[model.display] = answers.get(k) or ModelResult(
                k, failure="no answer from the worker")

    for key, found in results.items():
        results[key] = configured.located(found, overlay, session.target)
    if answered is not None:
        answered()
    run_paths = {str(file.resolved) for file in todo}
    display = {str(file.resolved): file.display for file in todo}
    loop_files: dict[str, LoopFile] = {}
    out = Models()
    failing = [m for m in models if model_stops(results[m.display])]
    fix_report = session.reporter("fix", len(failing)) if session.fix_rounds else None
    finished: list[tuple[configured.Configured, ModelResult, list[str], str | None]] = []
    resolved = [(file, str(file.resolved)) for file in todo]
    for model in models:
        result = results[model.display]
        rounds: list[str] = []
        if session.fix_rounds and model_stops(result):
            result = run_fix_loop(model, result, overlay, loop_files, run_paths, observations,
                               session, pool, rounds)
            if fix_report is not None:
                fix_report()
        display.update({path: f.display for path, f in loop_files.items()})
        blocker = configured.to_explain(result)
        # The blocker's file as this model's job saw it (a later fix loop may rewrite it).
        text = None
        if blocker is not None and blocker.path is not None:
            loop_file = loop_files.get(blocker.path)
            text = loop_file.text if loop_file and loop_file.text else overlay.get(blocker.path)
        finished.append((model, result, rounds, text))
        for file, path in resolved:
            if file.index == model.file.index or path in result.files:
                out.depends.setdefault(file.index, set()).update(result.files)
    # `tsfix check` of a file takes about what rewriting it took.
    seconds = {str(item.file.resolved): item.rewrite_s for item in pending}
    # A rule whose rewrite of a class this run rejected is not the fix to recommend for it.
    rejected: dict[str, dict[str, dict[str, str]]] = {}
    for item in pending:
        for c in (final.classes if (final := finals.get(item.index)) is not None else ()):
            if c.verdict == REJECTED:
                rejected.setdefault(str(item.file.resolved), {}).setdefault(
                    c.class_name, {})[c.rule] = c.reason
    explanations = explain_blockers(finished, display, session, rewriters, seconds, rejected)
    for model, result, rounds, text in finished:
        blocker = configured.to_explain(result)
        explanation = None if blocker is None else explanations.get(explain_key(blocker, text))
        texts = {blocker.path: text} if blocker and blocker.path and text is not None else {}
        out.records.setdefault(model.file.index, []).append(
            configured.record_of(model, result, texts=texts, display=display, rounds=rounds,
                                 target=session.target, explanation=explanation))
    for path, loop_file in loop_files.items():
        if not loop_file.text or loop_file.text == loop_file.source.text:
            continue
        from tsfix.codemods.pipeline.rewrite import unified_diff

        result_file = FileResult(Path(path), loop_file.display, "changed",
                                 classes=loop_file.results,
                                 diff=unified_diff(loop_file.source.text, loop_file.text,
                                                   loop_file.display),
                                 new_text=loop_file.text, fix_loop=True)
        out.extra.append(Outcome(result_file, loop_file.text, loop_file.source))
    return out
