"""A class a configured model could not check (``NOT_CHECKED``) checked again by that model on
the final tree, until no class is newly rejected.
"""

from __future__ import annotations

from collections.abc import Callable

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases.finals import final_overlay, final_texts
from tsfix.codemods.pipeline.phases.records import Checked, Final, Pending, by_class
from tsfix.codemods.pipeline.phases.state import RunState
from tsfix.codemods.pipeline.report import (
    REJECTED,
)
from tsfix.codemods.validation.protocol import (
    NOT_CHECKED,
)


def _ticks(report: Callable[..., None]) -> Callable[..., None]:
    """An ``on_result`` callback that counts one item per result."""
    return lambda *_: report()


def recheck_not_checked(state: RunState) -> dict[int, Final]:
    """A class a model reached but could not check (``NOT_CHECKED``: the rewritten model did
    not build or run for another class's rewrite) and that the final texts still hold is
    checked again by that model on the final tree; a class rejected there is left out too,
    and the round repeats until no class is newly rejected (each round leaves one out).
    ``state.rechecked`` gets each model's last answer and the overlay it ran on; returns
    the final texts."""
    pending, checked, finals, session = state.pending, state.checked, state.finals, state.session
    by_path = {str(item.file.resolved): item for item in pending}
    for _ in range(sum(len(item.classes) for item in pending)):
        overlay = final_overlay(pending, finals)
        jobs: list[tuple[configured.Configured, list[tuple[Pending, str]]]] = []
        for model in state.models:
            answer = state.validated.get(model.display)
            wanted = []
            for found in answer.classes if answer is not None else ():
                item = by_path.get(found.path)
                if (item is None or not found.verdict.reason.startswith(NOT_CHECKED)
                        or found.path not in overlay):
                    continue
                now = checked[item.index].verdicts.get(found.verdict.name)
                if now is not None and now.verdict != REJECTED:
                    wanted.append((item, found.verdict.name))
            if wanted:
                jobs.append((model, wanted))
        if not jobs:
            break
        answers = state.pool.models(
            [configured.model_job(k, model, session, overlay=overlay, classes=[
                configured.model_class(item.file.resolved, name, by_class(item.classes)[name])
                for item, name in wanted],
                reads=configured.reads_of(state.validated.get(model.display)))
             for k, (model, wanted) in enumerate(jobs)],
            timeout=session.timeout, on_result=_ticks(session.reporter("models", len(jobs))))
        results = {model.display: answers[k] for k, (model, _) in enumerate(jobs)
                   if k in answers}
        for display, result in results.items():
            state.rechecked[display] = (overlay, result)
        newly_rejected = False
        for (path, name), verdict in configured.merged_verdicts(results.items()).items():
            item = by_path[path]
            now = checked[item.index].verdicts.get(name)
            if now is None or now.verdict == REJECTED:
                continue
            if verdict.verdict == REJECTED or now.reason.startswith(NOT_CHECKED):
                checked[item.index] = Checked({**checked[item.index].verdicts, name: verdict})
                newly_rejected = newly_rejected or verdict.verdict == REJECTED
        finals = final_texts(pending, checked, state.drops, session, state.rewriters,
                             recheck=True)
        if not newly_rejected:
            break
    if any(v.reason.startswith(NOT_CHECKED) for check in checked.values()
           for v in check.verdicts.values()):
        # What no model could check is now as proven as it will be (fix safety).
        finals = final_texts(pending, checked, state.drops, session, state.rewriters)
    return finals
