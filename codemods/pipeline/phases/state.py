"""What the phases of one run hand each other once they are over (:class:`RunState`).

Each phase reads what the earlier ones left and sets its own fields: ``observe`` and
``rewriting`` the pending files, ``validate`` the verdicts and model answers, ``trials`` the
rule drops, ``finals`` (with ``recheck``) the final texts, ``model_verdicts`` the models'
records. A phase takes the state (and at most a callback), so that its signature says which
run it belongs to, not a dozen of its parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases.records import Checked, Drop, File, Final, Pending
from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.validation.protocol import ModelResult

if TYPE_CHECKING:
    from tsfix.codemods.pipeline.phases.processes import Rewriters
    from tsfix.codemods.validation.pool import WorkerPool


@dataclass
class RunState:
    """One run's files, its processes, and what each phase found so far."""

    todo: list[File]
    session: Session
    pool: WorkerPool
    rewriters: Rewriters
    models: list[configured.Configured] = field(default_factory=list)
    observations: configured.Observations = field(default_factory=configured.Observations)
    pending: list[Pending] = field(default_factory=list)     # the files the rules changed
    checked: dict[int, Checked] = field(default_factory=dict)  # by file index
    drops: dict[int, dict[str, Drop]] = field(default_factory=dict)
    finals: dict[int, Final] = field(default_factory=dict)
    validated: dict[str, ModelResult] = field(default_factory=dict)   # by model display
    # A model's last answer from the recheck phase, and the overlay it ran on.
    rechecked: dict[str, tuple[dict[str, str], ModelResult]] = field(default_factory=dict)
