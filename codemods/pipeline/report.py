"""What a run did, per file and per rewritten class, as data, JSON and a closing summary."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from tsfix.codemods.validation import (
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    VerdictName,
    verdict_name,
)

__all__ = ["REJECTED", "REPEATED_MIN", "UNVERIFIED", "VERIFIED", "ClassResult", "FileResult",
           "Interrupted", "ModelRecord", "Phase", "Progress", "ReasonGroup", "RunResult",
           "SkipResult", "TimeLimitReached", "model_headline", "printable", "reason_headline",
           "repeated_models", "repeated_reasons"]

# The phases of a run, as the progress display names them (engine.py's docstring).
Phase = Literal["observe", "rewrite", "validate", "trials", "recheck", "final", "models",
                "fix", "explain"]

# Exit codes, black/ruff style (documented in the README and `tsfix apply --help`).
EXIT_OK = 0               # nothing to do, or everything applied
EXIT_PENDING = 1          # --check / --dry-run: changes would be made
EXIT_USAGE = 2            # bad command line or configuration
EXIT_FAILED = 3           # a rewrite was rejected by validation, or a file failed


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT), SIGTERM or the time limit stopped a run: ``written`` names the files
    it had already written (as the report names them), each of them whole; every other file
    is as it was. ``undecided``: the files whose outcome was not known yet (the next run
    does them; decided ones it answers from the cache). ``time_limit``: the seconds of the
    ``--timeout-total`` that stopped it (None: a signal)."""

    def __init__(self, written: Collection[str] = (), undecided: Collection[str] = (),
                 time_limit: float | None = None) -> None:
        super().__init__()
        self.written = tuple(written)
        self.undecided = tuple(undecided)
        self.time_limit = time_limit


class TimeLimitReached(KeyboardInterrupt):
    """The run's ``--timeout-total`` ran out: raised in the run's thread, and handled as
    Ctrl-C is (pending work cancelled), then reported as :class:`Interrupted`."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds


@dataclass(frozen=True)
class Progress:
    """How far a run is: ``done`` of ``total`` items of the current phase (files while
    observing, rewriting and writing final texts; classes while validating; trials while
    rewriting and validating each class without one rule), with the counts so far."""

    phase: Phase
    done: int
    total: int
    rewrites: int = 0                       # class rewrites found so far
    verdicts: dict[str, int] = field(default_factory=dict)
    target: str = "torchscript"             # what the models phase proves: script or export


@dataclass(frozen=True)
class ClassResult:
    """One rule's rewrite of one class and the class's verdict. Phases of a run never change
    one: a later verdict is a new record (``dataclasses.replace``)."""

    rule: str
    class_name: str
    lines: tuple[int, int]
    summary: str
    lifted: dict[str, str]
    verdict: VerdictName = UNVERIFIED
    reason: str = ""
    duration_s: float = 0.0
    # What a reviewer must know beyond the summary (from the rule's ClassChange.notes).
    notes: list[str] = field(default_factory=list)
    # The rewrite calls a @torch.jit.ignore method: scripts and runs, cannot be saved.
    python_only: bool = False
    # Cannot change eager behaviour (pipeline/safety.py): written even when unverified.
    safe: bool = False
    # Why a rewrite that was not rejected is still not written (an unsafe one not proven).
    withheld: str = ""

    @property
    def written(self) -> bool:
        return self.verdict != REJECTED and not self.withheld


@dataclass(frozen=True)
class SkipResult:
    """A candidate a rule left alone, and why (``-v``; the report's ``skips``): the fields of
    the rule's :class:`~tsfix.codemods.rules.base.Skip`, in a record that needs no LibCST, so
    that a report or a cached outcome is read without loading the rules."""

    rule: str
    class_name: str
    line: int
    reason: str
    code: str | None = None
    column: int = 0
    message: str = ""

    @classmethod
    def of(cls, skip: Any) -> SkipResult:
        """The record of a rule's ``Skip`` (or any object with these fields)."""
        return cls(**{f.name: getattr(skip, f.name) for f in fields(cls)})


# ModelRecord.status
MODEL_SCRIPTS, MODEL_FAILS, MODEL_ERROR = "scripts", "fails", "error"
# MODEL_SCRIPTS as the JSON report says it under the export target.
MODEL_EXPORTS = "exports"


@dataclass(frozen=True)
class ModelRecord:
    """A configured model's verdict once every rewrite is decided: it scripts end to end with
    the ORIGINAL eager outputs and survives save/load, or where it stops and what tsfix
    explain says about that."""

    model: str                              # "path:Class", the path as the report shows files
    status: str                             # scripts | fails | error
    reason: str
    scripted_before: bool | None = None     # the original model scripts (None: not known)
    blocker: str | None = None              # "path:line" where scripting stops
    scope: str | None = None                # the class, method or function there
    message: str = ""                       # TorchScript's message, first lines
    explain: str = ""                       # tsfix explain's answer: construct, fix or hand fix
    # The repair loop: one line per round (what blocked, what was rewritten, the outcome).
    rounds: list[str] = field(default_factory=list)
    python_only: bool = False
    duration_s: float = 0.0
    # "export": status "scripts" means every configuration exports with torch.export and its
    # programs match the original's eager outputs; scripted_before: the original exports.
    target: str = "torchscript"
    # The run's own rewrites of the classes the model holds ("file:Class rule"): its first
    # round, when there are any.
    rewrites: list[str] = field(default_factory=list)
    # The repair loop's rounds kept, one each ("file:line rule": where the model stopped and
    # the rule that got it past there).
    repairs: list[str] = field(default_factory=list)
    # Why the repair loop stopped while the model still stops ("" when it did not run).
    stopped: str = ""

    @property
    def ok(self) -> bool:
        return self.status == MODEL_SCRIPTS

    def line(self) -> str:
        """The one line the run prints for the model: its verdict, the rounds that got it
        there (the run's rewrites, then each repair), and where it stops and why."""
        verb, did = (("export", "exported") if self.target == "export"
                     else ("script", "scripted"))
        before = ("" if self.scripted_before is None else
                  f" ({did} before tsfix)" if self.scripted_before else
                  f" (did not {verb} before tsfix)")
        rounds = ([", ".join(self.rewrites)] if self.rewrites else []) + self.repairs
        after = (f" after {len(rounds)} round{'s' if len(rounds) != 1 else ''} "
                 f"({'; '.join(rounds)})" if rounds else "")
        if self.ok:
            return f"{self.model}: model {verb}s{before}{after}: {self.reason}"
        if self.status == MODEL_ERROR:
            return f"{self.model}: model not checked: {self.reason}"
        where = f" at {self.blocker}" + (f" ({self.scope})" if self.scope else "")
        stopped = f"; {self.stopped}" if self.stopped else ""
        return (f"{self.model}: model does not {verb}{before}{after}"
                f"{where if self.blocker else ''}: {self.reason}{stopped}")

    def to_json(self) -> dict[str, Any]:
        """The record; under the export target a model that exports has status "exports"."""
        data = asdict(self)
        if self.target == "export" and self.status == MODEL_SCRIPTS:
            data["status"] = MODEL_EXPORTS
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelRecord:
        known = {f.name for f in fields(cls)}
        record = cls(**{k: v for k, v in data.items() if k in known})
        return (replace(record, status=MODEL_SCRIPTS) if record.status == MODEL_EXPORTS
                else record)


@dataclass(frozen=True)
class FileResult:
    """What a run did to one file. Built once, when the run's phases are over."""

    path: Path
    display: str
    status: str = "unchanged"      # unchanged | changed | rejected | failed | skipped
    error: str | None = None
    classes: list[ClassResult] = field(default_factory=list)
    skips: list[SkipResult] = field(default_factory=list)
    diff: str = ""
    written: bool = False
    # File-level remarks, e.g. why a class has no observed types.
    notes: list[str] = field(default_factory=list)
    # Types seen in the eager example runs (only when a selected rule asked for them).
    observed: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    rewrite_s: float = 0.0         # reading, rewriting and formatting the file
    cached: bool = False           # restored from the cache: not parsed nor validated again
    # The configured models (example tables) of this file: one verdict each.
    models: list[ModelRecord] = field(default_factory=list)
    # Other files this outcome depends on (a model's imports): resolved path -> sha256 of
    # their bytes when the run ended; the cache entry is stale when one differs.
    depends: dict[str, str] = field(default_factory=dict)
    # Not among the paths given: the fix loop rewrote it (a file a configured model imports).
    fix_loop: bool = False
    # A changed file's new text (written, or what would be); not in the JSON report.
    new_text: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class RunResult:
    files: list[FileResult]
    rules: list[str]
    mode: str                      # write | diff | check
    verify: bool
    require_verified: bool
    unsafe_fixes: bool = False
    # Processes that rewrote files: 0 when the run rewrote in its own process.
    rewrite_processes: int = 0
    cache_hits: int = 0
    # About the run rather than a file: a given folder without Python files.
    warnings: tuple[str, ...] = ()
    # A configured model that does not script does not fail the run (--allow-unscriptable).
    allow_unscriptable: bool = False
    # Seconds per phase (observe, rewrite, validate, trials, models, fix, ...), in run order.
    phase_s: dict[str, float] = field(default_factory=dict)
    # Items per phase, in the progress display's units: models observed, files rewritten,
    # classes validated, rule-drop trials, model jobs, models given to the repair loop, ...
    phase_items: dict[str, int] = field(default_factory=dict)

    def classes(self) -> list[ClassResult]:
        return [c for f in self.files for c in f.classes]

    def model_verb(self) -> str:
        """What a configured model's verdict proves: "script", or "export" (torch.export)."""
        models = self.models()
        return "export" if models and models[0].target == "export" else "script"

    def models(self) -> list[ModelRecord]:
        return [m for f in self.files for m in f.models]

    def after_review(self, written: Collection[Path]) -> RunResult:
        """This dry run once an interactive review wrote the files ``written``: it exits as a
        write run would (what was declined is the user's decision, not pending)."""
        files = [replace(f, written=True) if f.path in written else f for f in self.files]
        return replace(self, files=files, mode="write")

    @property
    def exit_code(self) -> int:
        failed = any(f.status == "failed" for f in self.files)
        rejected = any(c.verdict == REJECTED for c in self.classes())
        if failed or rejected:
            return EXIT_FAILED
        # A model that does not script fails the run; one that could not be checked (its
        # original does not build or run, a timeout) is like an unverified rewrite.
        if not self.allow_unscriptable and any(m.status == MODEL_FAILS for m in self.models()):
            return EXIT_FAILED
        if self.require_verified and (any(c.verdict == UNVERIFIED for c in self.classes())
                                      or any(m.status == MODEL_ERROR for m in self.models())):
            return EXIT_FAILED
        if self.mode in ("diff", "check") and any(f.status == "changed" for f in self.files):
            return EXIT_PENDING
        return EXIT_OK

    def counts(self) -> dict[str, int]:
        statuses = Counter(f.status for f in self.files)
        verdicts = Counter(c.verdict for c in self.classes())
        return {"files": len(self.files), "changed": statuses["changed"],
                "unchanged": statuses["unchanged"] + statuses["skipped"],
                "failed": statuses["failed"], "classes": len(self.classes()),
                VERIFIED: verdicts[VERIFIED], REJECTED: verdicts[REJECTED],
                UNVERIFIED: verdicts[UNVERIFIED],
                "withheld": sum(bool(c.withheld) for c in self.classes())}

    def summary_line(self) -> str:
        c = self.counts()
        would = self.mode != "write"
        changed = f"{c['changed']} file{'s' if c['changed'] != 1 else ''} " + (
            "would be changed" if would else "changed")
        parts = [changed, f"{c['unchanged']} unchanged"]
        if c["failed"]:
            parts.append(f"{c['failed']} failed")
        verdicts = (f"{c['classes']} class rewrite{'s' if c['classes'] != 1 else ''}: "
                    f"{c[VERIFIED]} verified, {c[REJECTED]} rejected, "
                    f"{c[UNVERIFIED]} unverified")
        if c["withheld"]:
            verdicts += (f" ({c['withheld']} of them not written: unsafe and unproven; "
                         "--unsafe-fixes writes them)")
        models = self.models()
        if models:
            scripting = sum(m.ok for m in models)
            verb = self.model_verb()
            verdicts += (f"; {len(models)} configured model{'s' if len(models) != 1 else ''}: "
                         f"{scripting} {verb}{'s' if scripting == 1 else ''}, "
                         f"{len(models) - scripting} "
                         f"do{'es' if len(models) - scripting == 1 else ''} not")
        return f"{', '.join(parts)}; {verdicts}."

    def to_json(self) -> dict[str, Any]:
        from tsfix.codemods import __version__

        return {
            "tsfix_version": __version__,
            "rules": self.rules,
            "mode": self.mode,
            "verify": self.verify,
            "unsafe_fixes": self.unsafe_fixes,
            "rewrite_processes": self.rewrite_processes,
            "cache_hits": self.cache_hits,
            "exit_code": self.exit_code,
            "summary": self.counts(),
            "warnings": list(self.warnings),
            "allow_unscriptable": self.allow_unscriptable,
            "phase_s": self.phase_s,
            "phase_items": self.phase_items,
            "models": [m.to_json() for m in self.models()],
            "files": [{
                "path": f.display,
                "status": f.status,
                "written": f.written,
                "error": f.error,
                "classes": [{**asdict(c), "lines": list(c.lines),
                             "written": f.written and c.written}
                            for c in f.classes],
                "skips": [asdict(s) for s in f.skips],
                "notes": f.notes,
                "observed": f.observed,
                "rewrite_s": f.rewrite_s,
                "cached": f.cached,
                "models": [m.to_json() for m in f.models],
                "fix_loop": f.fix_loop,
            } for f in self.files],
        }

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        """The run a ``--report`` file describes (``tsfix report``). Raises KeyError or
        TypeError when ``data`` is not such a report."""
        files = []
        for f in data["files"]:
            classes = [ClassResult(c["rule"], c["class_name"],
                                   (c["lines"][0], c["lines"][1]), c["summary"],
                                   dict(c.get("lifted", {})), verdict_name(c["verdict"]),
                                   c.get("reason", ""), c.get("duration_s", 0.0),
                                   list(c.get("notes", [])), c.get("python_only", False),
                                   c.get("safe", False), c.get("withheld", ""))
                       for c in f["classes"]]
            skips = [SkipResult(s["rule"], s["class_name"], s["line"], s["reason"],
                                s.get("code"), s.get("column", 0), s.get("message", ""))
                     for s in f.get("skips", [])]
            files.append(FileResult(Path(f["path"]), f["path"], f["status"], f.get("error"),
                                    classes, skips, written=f.get("written", False),
                                    notes=list(f.get("notes", [])),
                                    observed=f.get("observed", {}),
                                    rewrite_s=f.get("rewrite_s", 0.0),
                                    cached=f.get("cached", False),
                                    models=[ModelRecord.from_json(m)
                                            for m in f.get("models", [])],
                                    fix_loop=f.get("fix_loop", False)))
        return cls(files, list(data["rules"]), data["mode"], data["verify"],
                   data.get("require_verified", False), data.get("unsafe_fixes", False),
                   data.get("rewrite_processes", 0), data.get("cache_hits", 0),
                   tuple(data.get("warnings", ())), data.get("allow_unscriptable", False),
                   dict(data.get("phase_s", {})), dict(data.get("phase_items", {})))

    def summary_table(self, top: int = 5) -> list[str]:
        """End-of-run table: files, rewrites per rule, verdicts, the slowest validations and
        the most common rejection reasons."""
        c = self.counts()
        rows = [("files", f"{c['files']} scanned, {c['changed']} changed, "
                          f"{c['unchanged']} unchanged, {c['failed']} failed")]
        per_rule = Counter(cl.rule for cl in self.classes())
        if per_rule:
            rows.append(("rewrites", ", ".join(f"{rule} {per_rule[rule]}"
                                               for rule in self.rules if per_rule[rule])))
            rows.append(("verdicts", f"{c[VERIFIED]} verified, {c[REJECTED]} rejected, "
                                     f"{c[UNVERIFIED]} unverified"))
        models = self.models()
        if models:
            scripting = sum(m.ok for m in models)
            rows.append(("models", f"{len(models)} configured, {scripting} "
                                   f"{self.model_verb()}, "
                                   f"{len(models) - scripting} do not"))
        if any(seconds >= 0.05 for seconds in self.phase_s.values()):
            # Where a run's time went: validation dominates real runs (issue 29).
            rows.append(("time", ", ".join(f"{phase} {seconds:.1f}s"
                                           for phase, seconds in self.phase_s.items()
                                           if seconds >= 0.05)))
        slow_models = sorted(((m.duration_s, m.model) for m in models if m.duration_s > 0),
                             reverse=True)[:top]
        for i, (seconds, name) in enumerate(slow_models):
            rows.append(("slowest" if i == 0 else "", f"{seconds:6.1f}s  model {name}"))
        timed: dict[tuple[str, str], float] = {}
        for f in self.files:
            for cl in f.classes:
                # One validation per class, shared by every rule that changed it.
                timed[(f.display, cl.class_name)] = max(
                    timed.get((f.display, cl.class_name), 0.0), cl.duration_s)
        slowest = sorted(((s, k) for k, s in timed.items() if s > 0), reverse=True)[:top]
        for i, (seconds, (path, name)) in enumerate(slowest):
            rows.append(("slowest" if i == 0 else "", f"{seconds:6.1f}s  {path}:{name}"))
        reasons = Counter(reason_kind(cl.reason) for cl in self.classes()
                          if cl.verdict == REJECTED)
        for i, (kind, count) in enumerate(reasons.most_common(top)):
            rows.append(("rejected" if i == 0 else "", f"{count}x {kind}"))
        width = max(len(label) for label, _ in rows)
        return [f"  {label:<{width}}  {text}" for label, text in rows]


_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_ESCAPES = {"\n": "\\n", "\r": "\\r"}


def printable(text: str) -> str:
    """``text`` safe to print as one line: control characters (a newline or an ANSI escape
    sequence in a file name, say) and bidirectional overrides become visible escapes
    (``\\n``, ``\\x1b``, ``\\u202e``) instead of breaking the line or reaching the
    terminal. Tabs stay."""
    return _CONTROL.sub(lambda m: _ESCAPES.get(m.group()) or
                        (f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                         else f"\\u{ord(m.group()):04x}"), text)


_QUOTED = re.compile(r"""'[^']*'|"[^"]*"|`[^`]*`""")
_NUMBER = re.compile(r"\b\d+(\.\d+)?(e-?\d+)?\b")


def reason_kind(reason: str, length: int = 90) -> str:
    """A rejection reason without its particulars, so that alike reasons count together:
    quoted names and numbers become placeholders, the configuration label is dropped."""
    kind = re.sub(r" for init\[.*$| for call\[.*$", "", reason)
    kind = _NUMBER.sub("N", _QUOTED.sub("'...'", kind))
    return kind if len(kind) <= length else kind[:length - 3] + "..."


# ---- repeated reasons --------------------------------------------------------------------------
#
# A run over many files repeats a few reasons for hundreds of classes (on ParityBench, 1,087
# helper classes "could not infer inputs"): without -v, the output says each such reason once.

REPEATED_MIN = 3                # classes sharing a reason before it is said once for all
_PARENTHESES = re.compile(r"\s*\([^()]*\)")


def reason_headline(reason: str, length: int = 160) -> str:
    """What alike reasons share: the reason without its parentheses (the error's particulars:
    where, what the original said, the exception's own text) and without what follows its
    first ``; `` (the table to add, what else was checked), quoted names and numbers as
    placeholders."""
    text = _QUOTED.sub("'...'", reason)
    while True:
        shorter = _PARENTHESES.sub("", text)
        if shorter == text:
            break
        text = shorter
    text = re.sub(r" for init\[.*$| for call\[.*$", "", text.split("; ")[0])
    text = " ".join(_NUMBER.sub("N", text).split())
    return text if len(text) <= length else text[:length - 3] + "..."


@dataclass(frozen=True)
class ReasonGroup:
    """A verdict and reason headline shared by ``REPEATED_MIN`` or more classes
    (``file:Class``, in the run's order), or configured models (``noun`` "models")."""

    verdict: str
    headline: str
    classes: tuple[str, ...]
    noun: str = "classes"

    def line(self, examples: int = 3) -> str:
        """``unverified: could not infer inputs: ... - 1,087 classes, e.g. a.py:Foo, b.py:Bar,
        c.py:Baz; -v for each``."""
        shown = ", ".join(self.classes[:examples])
        return (f"{self.verdict}: {self.headline} - {len(self.classes):,} {self.noun}, "
                f"e.g. {shown}; -v for each")


def repeated_reasons(files: Iterable[FileResult], minimum: int = REPEATED_MIN
                     ) -> list[ReasonGroup]:
    """The rejected and unverified reasons that ``minimum`` or more classes share, most
    classes first (a class changed by several rules counts once)."""
    groups: dict[tuple[str, str], dict[str, None]] = {}
    for file in files:
        for c in file.classes:
            if c.verdict in (REJECTED, UNVERIFIED) and c.reason:
                key = (c.verdict, reason_headline(c.reason))
                groups.setdefault(key, {})[f"{file.display}:{c.class_name}"] = None
    found = [ReasonGroup(verdict, headline, tuple(classes))
             for (verdict, headline), classes in groups.items() if len(classes) >= minimum]
    return sorted(found, key=lambda g: -len(g.classes))


def model_headline(model: ModelRecord) -> tuple[str, str] | None:
    """What a configured model's line says apart from the model and its numbers, as
    (verdict, headline); None for a model that does not script (its line names its own
    blocker and comes with an explanation: always said)."""
    if model.status == MODEL_FAILS:
        return None
    # Models alike but for the rewrites that got each there are said once too.
    line = replace(model, rewrites=[], repairs=[]).line()
    verdict, _, headline = line.removeprefix(f"{model.model}: ").partition(": ")
    return verdict, " ".join(_NUMBER.sub("N", headline).split())


def repeated_models(models: Iterable[ModelRecord], minimum: int = REPEATED_MIN
                    ) -> list[ReasonGroup]:
    """The lines ``minimum`` or more configured models share (those that script, or that
    could not be checked, for one reason), most models first."""
    groups: dict[tuple[str, str], list[str]] = {}
    for model in models:
        key = model_headline(model)
        if key is not None:
            groups.setdefault(key, []).append(model.model)
    found = [ReasonGroup(verdict, headline, tuple(names), "models")
             for (verdict, headline), names in groups.items() if len(names) >= minimum]
    return sorted(found, key=lambda g: -len(g.classes))
