"""The records the phases hand each other: frozen, built once, never changed later; and the
small functions that build or group them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tsfix.codemods.pipeline.config import ExampleSpec
from tsfix.codemods.pipeline.report import (
    ClassResult,
    FileResult,
    SkipResult,
)
from tsfix.codemods.pipeline.sources import SourceText
from tsfix.codemods.validation.protocol import (
    ClassVerdict,
    JobClass,
    TypeTable,
)

if TYPE_CHECKING:

    from tsfix.codemods.rules.base import ClassChange


@dataclass(frozen=True)
class File:
    """A file found for the run, and the names it goes by."""

    index: int                              # in the run's list of files
    path: Path                              # as discovered
    resolved: Path
    display: str                            # in messages and the report


@dataclass(frozen=True)
class Observed:
    """What the observe round found for one file."""

    types: TypeTable = field(default_factory=dict)
    notes: tuple[str, ...] = ()             # why a class has no observations
    # Observing the original's examples timed out: validation would hang the same way.
    timed_out: str | None = None


@dataclass(frozen=True)
class ToRewrite:
    """A file for the first rewrite round: read it, pre-filter, rewrite."""

    index: int                              # in the run's list of files
    path: Path
    display: str
    observed: TypeTable


@dataclass(frozen=True)
class Rewritten:
    """The first round's answer for one file."""

    index: int
    status: Literal["unchanged", "changed", "skipped", "failed"]
    error: str | None = None
    source: SourceText | None = None        # changed files only
    text: str = ""                          # changed files: the rewrite with every rule
    classes: tuple[ClassResult, ...] = ()   # one per rule and class it changed, unverified
    skips: tuple[SkipResult, ...] = ()
    rewrite_s: float = 0.0


# A rule name -> classes it must leave alone; hashable, so equal skip sets share a rewrite.
SkipSet = tuple[tuple[str, frozenset[str]], ...]


@dataclass(frozen=True)
class ToRewriteAgain:
    """A text already read, rewritten again with rules skipping classes (trials, final)."""

    key: int
    text: str
    display: str
    observed: TypeTable
    skip: SkipSet


@dataclass(frozen=True)
class RewrittenAgain:
    key: int
    text: str = ""
    classes: tuple[ClassResult, ...] = ()
    error: str | None = None                # the rules raised


@dataclass(frozen=True)
class Pending:
    """A file the rules changed, on its way through validation."""

    file: File
    source: SourceText
    text: str
    classes: tuple[ClassResult, ...]
    observed: Observed
    rewrite_s: float = 0.0                  # the first round's time for this file

    @property
    def index(self) -> int:
        return self.file.index

    def again(self, key: int, skip: SkipSet) -> ToRewriteAgain:
        return ToRewriteAgain(key, self.source.text, self.file.display, self.observed.types,
                              skip)


@dataclass(frozen=True)
class Checked:
    """The validate phase's answer for one file: a verdict per class, or the file fails (a
    broken example table)."""

    verdicts: Mapping[str, ClassVerdict] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Drop:
    """A trial that verified: ``class_name`` without ``dropped``'s rewrite ("": with every
    rule, the file's other rejected classes left out)."""

    class_name: str
    dropped: str
    verdict: ClassVerdict
    kept: tuple[ClassResult, ...]           # the trial's ClassResults for the class
    skip: SkipSet
    text: str
    # Every rewrite of the trial's text, of any class (a final text taken from it must hold
    # no rewrite the run did not validate).
    changes: tuple[ClassResult, ...] = ()


@dataclass(frozen=True)
class Final:
    """What the run makes of a changed file: its FileResult fields and the text to write."""

    status: str
    classes: tuple[ClassResult, ...] = ()
    error: str | None = None
    text: str | None = None                 # status "changed": the new text


@dataclass(frozen=True)
class Outcome:
    """What the phases made of one file: its result, and for a changed file the new text and
    the file as it was read (its encoding and line endings, for the write)."""

    result: FileResult
    text: str | None = None
    source: SourceText | None = None


def class_result(change: ClassChange) -> ClassResult:
    return ClassResult(change.rule, change.class_name, change.lines, change.summary,
                       dict(change.lifted), notes=list(change.notes),
                       python_only=change.python_only, safe=change.safe)


def internal_error(display: str, exc: Exception) -> str:
    return (f"{display}: internal error ({type(exc).__name__}: {exc}); "
            "nothing was changed. Please report this with the file.")


def by_class(classes: Iterable[ClassResult]) -> dict[str, list[ClassResult]]:
    """ClassResults grouped by class, in order of first appearance (one group per class)."""
    groups: dict[str, list[ClassResult]] = {}
    for c in classes:
        groups.setdefault(c.class_name, []).append(c)
    return groups


def job_class(name: str, results: Iterable[ClassResult], spec: ExampleSpec) -> JobClass:
    """One validation entry for a class, whatever number of rules changed it."""
    results = list(results)
    lifted: dict[str, str] = {}
    for c in results:
        lifted.update(c.lifted)
    return JobClass(name, spec.to_example(), tuple(dict.fromkeys(c.rule for c in results)),
                    lifted, any(c.python_only for c in results))


def skip_set_of(skip: Mapping[str, frozenset[str]]) -> SkipSet:
    return tuple(sorted((rule, classes) for rule, classes in skip.items() if classes))


def with_verdicts(classes: Iterable[ClassResult], checked: Checked) -> list[ClassResult]:
    """The ClassResults with their class's verdict."""
    out = []
    for c in classes:
        v = checked.verdicts.get(c.class_name)
        out.append(c if v is None else
                   replace(c, verdict=v.verdict, reason=v.reason, duration_s=v.duration_s))
    return out
