"""What ``tsfix explain`` says about each distinct place where a configured model stops,
computed in the rewrite processes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases.processes import Rewriters
from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.validation.protocol import (
    Blocker,
    ModelResult,
)

if TYPE_CHECKING:

    pass


# A blocker to explain: its file, that file's text as the model's job saw it (None: as on
# disk), TorchScript's message and the scope it names.
_ExplainKey = tuple[str, str | None, str, str | None]


def explain_key(blocker: Blocker, text: str | None) -> _ExplainKey:
    return (str(blocker.path), text, blocker.message, blocker.scope)


@dataclass(frozen=True)
class _ToExplain:
    """The blockers of one file (one text) to explain, for a rewrite process."""

    key: int
    path: str
    text: str | None
    shown: str
    target: str
    blockers: tuple[tuple[str, str | None], ...]        # (message, scope)
    # class -> rule -> why the run rejected that rule's rewrite of the class
    rejected: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Explained:
    key: int
    explanations: tuple[str, ...]                       # one per blocker, in order


def explain_blockers(finished: Sequence[tuple[configured.Configured, ModelResult, list[str],
                                              str | None]],
                     display: Mapping[str, str], session: Session, rewriters: Rewriters,
                     seconds: Mapping[str, float] | None = None,
                     rejected: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None
                      ) -> dict[_ExplainKey, str]:
    """What ``tsfix explain`` says about each distinct blocker of the models that stop.

    Explaining runs ``tsfix check`` on the blocker's file: seconds for a large file, and on
    ParityBench (thousands of configured models, most blocked somewhere) it was the run's
    longest silent phase, on one core. Models blocked at the same place share one answer;
    the files are explained in the rewrite processes, with progress (``seconds``: each
    file's first rewrite time, what checking it is expected to take). ``rejected``: by
    file, class and rule, why the run rejected a rewrite (that rule is not recommended)."""
    by_file: dict[tuple[str, str | None], dict[tuple[str, str | None], None]] = {}
    for _, result, _, text in finished:
        blocker = configured.to_explain(result)
        if blocker is not None and blocker.path is not None:
            by_file.setdefault((blocker.path, text), {})[(blocker.message, blocker.scope)] = None
    if not by_file:
        return {}
    items = [_ToExplain(k, path, text, display.get(path) or configured.shown(path),
                        session.target, tuple(blockers), (rejected or {}).get(path, {}))
             for k, ((path, text), blockers) in enumerate(by_file.items())]
    report = session.reporter("explain", len(items))
    answers = {a.key: a for a in rewriters.map(
        _explain_file, items, lambda _: report(),
        seconds=sum((seconds or {}).get(item.path, 0.0) for item in items))}
    found: dict[_ExplainKey, str] = {}
    for item in items:
        for (message, scope), explanation in zip(item.blockers, answers[item.key].explanations,
                                                 strict=True):
            found[(item.path, item.text, message, scope)] = explanation
    return found


def _explain_file(item: _ToExplain, settings: RewriteSettings) -> _Explained:
    explanations = []
    for message, scope in item.blockers:
        blocker = Blocker(item.path, None, scope, message)
        try:
            explanations.append(configured.explain_blocker(
                blocker, item.text, item.shown, item.target,
                item.rejected.get((scope or "").split(".")[0])))
        except Exception as exc:
            explanations.append(f"not explained: internal error ({type(exc).__name__}: {exc})")
    return _Explained(item.key, tuple(explanations))
