"""Rule-drop trials: which rule's rewrite broke a class that several rules changed
(:mod:`~tsfix.codemods.pipeline.engine`'s docstring, "Rules together").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline.config import ExampleSpec
from tsfix.codemods.pipeline.phases.processes import Rewriters
from tsfix.codemods.pipeline.phases.records import (
    Checked,
    Drop,
    Pending,
    RewrittenAgain,
    SkipSet,
    by_class,
    job_class,
    skip_set_of,
    with_verdicts,
)
from tsfix.codemods.pipeline.phases.rewriting import rewrite_again
from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.pipeline.phases.validate import example_for
from tsfix.codemods.pipeline.report import (
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    ClassResult,
)
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import (
    NOT_SCRIPTABLE_EITHER,
    STOPS_WHERE_THE_ORIGINAL_STOPS,
    ValidationJob,
)

if TYPE_CHECKING:

    pass


@dataclass(frozen=True)
class _Trial:
    pending: Pending
    class_name: str
    dropped: str            # the rule left out for this class ("": none)
    spec: ExampleSpec
    skip: SkipSet


def drop_rules(pending: list[Pending], checked: dict[int, Checked], session: Session,
               pool: WorkerPool, rewriters: Rewriters
                ) -> dict[int, dict[str, Drop]]:
    """For each rejected class changed by several rules, rewrite and validate it once without
    each rule (one parallel round of each); drop the last rule in registry order whose
    removal verifies. Returns file index -> class -> the trial kept."""
    trials = [trial for item in pending for trial in trials_of(item, checked[item.index],
                                                               session)]
    if not trials:
        return {}

    report = session.reporter("trials", len(trials))
    rewritten = {r.key: r for r in rewriters.map(
        rewrite_again, [t.pending.again(k, t.skip) for k, t in enumerate(trials)],
        lambda _: report(), seconds=sum(t.pending.rewrite_s for t in trials),
        together=lambda again: again.display)}
    jobs: list[ValidationJob] = []
    by_job: dict[int, tuple[_Trial, RewrittenAgain]] = {}
    for k, trial in enumerate(trials):
        answer = rewritten[k]
        changed = [c for c in answer.classes if c.class_name == trial.class_name]
        if answer.error is not None or not changed:
            continue  # without this rule nothing changes the class: not a fix
        job = ValidationJob(len(jobs), str(trial.pending.file.resolved), answer.text,
                            (job_class(trial.class_name, changed, trial.spec),),
                            session.sys_path, target=session.target)
        jobs.append(job)
        by_job[job.id] = (trial, answer)
    if not jobs:
        return {}
    report = session.reporter("recheck", len(jobs))
    verdicts = pool.validate(jobs, timeout=session.timeout, on_result=lambda *_: report())

    # (file, class) -> verified trials
    verified: dict[tuple[int, str], list[Drop]] = {}
    for job_id, class_verdicts in verdicts.items():
        trial, answer = by_job[job_id]
        for v in class_verdicts:
            if v.name == trial.class_name and v.verdict == VERIFIED:
                kept = tuple(c for c in answer.classes if c.class_name == trial.class_name)
                verified.setdefault((trial.pending.index, trial.class_name), []).append(
                    Drop(trial.class_name, trial.dropped, v, kept, trial.skip, answer.text,
                         answer.classes))
    drops: dict[int, dict[str, Drop]] = {}
    for (index, name), found in verified.items():
        # The largest kept set: every rule ("" dropped nothing), else all but the last rule.
        drops.setdefault(index, {})[name] = max(found, key=lambda d: session.rank(d.dropped))
    return drops


def trials_of(item: Pending, check: Checked, session: Session) -> list[_Trial]:
    """The rule-drop trials of one file with these verdicts (none: no trial can change it)."""
    if check.error is not None:
        return []
    trials: list[_Trial] = []
    groups = by_class(with_verdicts(item.classes, check))
    rejected = {name for name, group in groups.items()
                if any(c.verdict == REJECTED for c in group)}
    # A class that scripted neither before nor after the combined rewrite may script with
    # one rule left out (annotate fixed what blocked it, another rule broke it again); not
    # when the rewrite stops at the original's own error (no rule got past it).
    not_scripting = {name for name, group in groups.items()
                     if any(c.verdict == UNVERIFIED
                            and c.reason.startswith(NOT_SCRIPTABLE_EITHER)
                            and STOPS_WHERE_THE_ORIGINAL_STOPS not in c.reason
                            for c in group)}
    for name in sorted(rejected | not_scripting, key=list(groups).index):
        contributing = sorted({c.rule for c in groups[name]}, key=session.rank)
        spec = example_for(session, item.file, name)
        if len(contributing) < 2 or not isinstance(spec, ExampleSpec):
            continue
        others = frozenset(rejected - {name})
        # With other rejected classes in the file, C may have failed for their sake (the
        # rewritten file does not import): then C with every rule is a trial too.
        for rule_name in ([""] if others else []) + contributing:
            skip = {rule: others for rule in session.rule_names}
            if rule_name:
                skip[rule_name] = others | {name}
            trials.append(_Trial(item, name, rule_name, spec, skip_set_of(skip)))
    return trials


def with_drop(classes: list[ClassResult], drop: Drop, session: Session) -> list[ClassResult]:
    """The file's ClassResults once ``drop`` is kept: its class's results are the trial's,
    with the trial's verdict, and the dropped rule's, rejected."""
    name = drop.class_name
    groups = by_class(classes)
    dropped = [replace(c, verdict=REJECTED,
                       reason=(f"dropped: {name} validates without this rule's rewrite; "
                               f"with it: {c.reason}"))
               for c in groups[name] if drop.dropped and c.rule == drop.dropped]
    kept = [replace(c, verdict=drop.verdict.verdict, reason=drop.verdict.reason,
                    duration_s=drop.verdict.duration_s) for c in drop.kept]
    groups[name] = sorted(kept + dropped, key=lambda c: session.rank(c.rule))
    return [c for group in groups.values() for c in group]
