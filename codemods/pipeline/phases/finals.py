"""Final texts: each changed file's classes and the text written, without what was held back
or withheld (docs/validation.md, "Fix safety").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline.phases.processes import Rewriters
from tsfix.codemods.pipeline.phases.records import (
    Checked,
    Drop,
    Final,
    Pending,
    RewrittenAgain,
    skip_set_of,
    with_verdicts,
)
from tsfix.codemods.pipeline.phases.rewriting import rewrite_again
from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.pipeline.phases.trials import with_drop
from tsfix.codemods.pipeline.report import (
    REJECTED,
    UNVERIFIED,
    ClassResult,
)
from tsfix.codemods.validation.protocol import (
    NOT_CHECKED,
    eager_parity_proven,
)

if TYPE_CHECKING:

    pass


def final_texts(pending: list[Pending], checked: dict[int, Checked],
                drops: dict[int, dict[str, Drop]], session: Session,
                rewriters: Rewriters, *, recheck: bool = False) -> dict[int, Final]:
    """Each changed file's final classes and text: the rewrite with every rule skipping the
    classes held back whole, and each dropped rule skipping its class. ``recheck``: a class a
    model could not check (NOT_CHECKED) stays in the text, for the models to check it there
    (recheck_not_checked); else it is withheld like any unproven unsafe rewrite."""
    finals: dict[int, Final] = {}
    again: list[tuple[Pending, list[ClassResult], dict[str, frozenset[str]]]] = []
    for item in pending:
        check = checked[item.index]
        if check.error is not None:
            # Nothing is written for a file with a broken example table.
            finals[item.index] = Final("failed", error=check.error)
            continue
        classes = with_verdicts(item.classes, check)
        dropped: dict[str, str] = {}
        for name, drop in drops.get(item.index, {}).items():
            classes = with_drop(classes, drop, session)
            if drop.dropped:
                dropped[name] = drop.dropped
        if session.require_verified:
            classes = [replace(c, verdict=REJECTED,
                               reason=f"unverified and --require-verified: {c.reason}")
                       if c.verdict == UNVERIFIED else c for c in classes]
        elif session.verify and not session.unsafe_fixes:
            classes = [c if recheck and c.reason.startswith(NOT_CHECKED)
                       else _withheld_unless_proven(c) for c in classes]
        # A class is held back whole unless its only rejected change is the dropped rule's.
        held_back = frozenset(c.class_name for c in classes
                              if c.verdict == REJECTED and dropped.get(c.class_name) != c.rule)
        withheld = [c for c in classes if c.withheld and c.class_name not in held_back]
        if not held_back and not dropped and not withheld:
            finals[item.index] = _decided(item, classes, item.text)
            continue
        skip = {rule: held_back for rule in session.rule_names}
        for name, rule_name in dropped.items():
            skip[rule_name] = skip.get(rule_name, frozenset()) | {name}
        for c in withheld:
            skip[c.rule] = skip.get(c.rule, frozenset()) | {c.class_name}
        skip_set = skip_set_of(skip)
        # A trial rewrote this file with these very skip sets: its text is the answer, when
        # it holds no rewrite the run did not validate.
        known = next((d for d in drops.get(item.index, {}).values()
                      if d.skip == skip_set and not _unvalidated(d.changes, classes)), None)
        if known is not None:
            finals[item.index] = _decided(item, classes, known.text)
        else:
            again.append((item, classes, skip))
    while again:
        answers = _rewritten_again(again, session, rewriters)
        unsettled = []
        for k, (item, classes, skip) in enumerate(again):
            answer = answers[k]
            if answer.error:
                finals[item.index] = Final("failed", error=answer.error)
                continue
            new = _unvalidated(answer.classes, classes)
            unsafe = [c for c in new if not c.safe]
            classes = [*classes, *(replace(c, reason=_UNVALIDATED) for c in new if c.safe),
                       *(replace(c, withheld=_UNVALIDATED_NOT_WRITTEN) for c in unsafe)]
            if not unsafe:
                finals[item.index] = _decided(item, classes, answer.text)
                continue
            # Leaving rewrites out can let a rule rewrite what it did not before (a lifted
            # setting gone, a wrapper's keywords are fewer): such a rewrite was never
            # validated, and is left out in its turn (hourglass-transformer's PreNormResidual).
            skip = dict(skip)
            for c in unsafe:
                skip[c.rule] = skip.get(c.rule, frozenset()) | {c.class_name}
            unsettled.append((item, classes, skip))
        again = unsettled
    return finals


def _rewritten_again(again: list[tuple[Pending, list[ClassResult], dict[str, frozenset[str]]]],
                     session: Session, rewriters: Rewriters) -> dict[int, RewrittenAgain]:
    report = session.reporter("final", len(again))
    return {r.key: r for r in rewriters.map(
        rewrite_again, [item.again(k, skip_set_of(skip))
                        for k, (item, _, skip) in enumerate(again)],
        lambda _: report(), seconds=sum(item.rewrite_s for item, _, _ in again))}


_UNVALIDATED = ("not validated: the rules made this rewrite only in the text written, once the "
                "rewrites not written were left out")
_UNVALIDATED_NOT_WRITTEN = ("not written: the rules made this rewrite only once the rewrites "
                            "not written were left out, and it was never validated")


def _unvalidated(found: Iterable[ClassResult], classes: Iterable[ClassResult]
                 ) -> list[ClassResult]:
    """The rewrites of ``found`` that are none of ``classes`` (by rule and class)."""
    known = {(c.rule, c.class_name) for c in classes}
    return [c for c in found if (c.rule, c.class_name) not in known]


# Why an unsafe rewrite that validation could not decide is not written (docs/validation.md).
WITHHELD_UNPROVEN = ("not written: it may change what the code computes (an unsafe fix) and "
                     "nothing proved it does not; --unsafe-fixes writes it")


def _withheld_unless_proven(c: ClassResult) -> ClassResult:
    """Fix safety: an unsafe rewrite is written when verified, or when eager parity held for
    every configuration and only compiling is left undecided (progress past a blocker); an
    unverified one with no such proof (no example inputs, an import or a constructor that
    failed, a timeout) is withheld. A safe one (pipeline/safety.py) is always written."""
    if c.verdict != UNVERIFIED or c.safe or eager_parity_proven(c.reason):
        return c
    return replace(c, withheld=WITHHELD_UNPROVEN)


def _decided(item: Pending, classes: list[ClassResult], text: str) -> Final:
    if text == item.source.text:
        rejected = any(c.verdict == REJECTED for c in classes)
        return Final("rejected" if rejected else "unchanged", tuple(classes))
    return Final("changed", tuple(classes), text=text)


def final_overlay(pending: list[Pending], finals: Mapping[int, Final]) -> dict[str, str]:
    """Resolved path -> the text the run writes, for every file it changes."""
    return {str(item.file.resolved): final.text for item in pending
            if (final := finals.get(item.index)) is not None and final.status == "changed"
            and final.text is not None}
