"""The fix loop: a configured model that stops in a file of the tree outside the run gets the
class or function that blocks it rewritten, validated through the model, round by round
(:mod:`~tsfix.codemods.pipeline.models`' docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline.phases.records import by_class, internal_error, skip_set_of
from tsfix.codemods.pipeline.phases.session import Session
from tsfix.codemods.pipeline.report import (
    MODEL_FAILS,
    MODEL_SCRIPTS,
    REJECTED,
    UNVERIFIED,
    VERIFIED,
    ClassResult,
)
from tsfix.codemods.pipeline.sources import SourceError, SourceText, read_source
from tsfix.codemods.validation.pool import WorkerPool
from tsfix.codemods.validation.protocol import (
    ClassVerdict,
    ModelResult,
    function_change_name,
)

if TYPE_CHECKING:

    pass


@dataclass
class LoopFile:
    """A file of the tree outside the run that the fix loop rewrote."""

    source: SourceText
    display: str
    classes: set[str] = field(default_factory=set)      # classes the loop rewrote in it
    functions: set[str] = field(default_factory=set)    # module-level functions, likewise
    text: str = ""
    results: list[ClassResult] = field(default_factory=list)


def _blocked_in(result: ModelResult, path: str, class_name: str | None, function: str | None,
                text: str) -> bool:
    """The model's blocker is in ``class_name`` (else the module-level ``function``) of
    ``path`` (whose text is ``text``)."""
    assert result.model is not None and result.model.blocker is not None
    blocker = result.model.blocker
    if blocker.path != path:
        return False
    found = configured.class_at(text, blocker.line, blocker.scope)
    if class_name is not None:
        return found == class_name
    return found is None and configured.function_at(text, blocker.line,
                                                    blocker.scope) == function


def _function_verdict(owner: str, answer: ModelResult, shown: str) -> ClassVerdict:
    """The verdict on a module-level function the fix loop rewrote: no class of its own to
    script, so the model's answer is its verdict. The model checks eager parity before it
    scripts, so a model that stops at a place TorchScript names has matched the original."""
    verdict = answer.model
    if verdict is None:
        return ClassVerdict(owner, UNVERIFIED, "the model job gave no verdict")
    if verdict.status == MODEL_SCRIPTS:
        return ClassVerdict(owner, VERIFIED, f"the model scripts with it ({verdict.reason})")
    if verdict.status == MODEL_FAILS and verdict.blocker is not None:
        blocker = verdict.blocker
        place = (f"at {configured.shown(blocker.path)}"
                 + (f":{blocker.line}" if blocker.line else "") if blocker.path
                 else f"({blocker.message.splitlines()[0] if blocker.message else '?'})")
        return ClassVerdict(owner, UNVERIFIED, f"the model's eager outputs match the "
                                               f"original's with it, and it still stops "
                                               f"scripting {place}: its scripted "
                                               "outputs cannot be compared yet")
    if verdict.status == MODEL_FAILS:
        return ClassVerdict(owner, REJECTED, f"the model with {owner} in {shown}: "
                                             f"{verdict.reason}")
    return ClassVerdict(owner, UNVERIFIED, f"the model: {verdict.reason}")


def model_stops(result: ModelResult) -> bool:
    """The model does not script, at a known place."""
    return (result.failure is None and result.model is not None
            and result.model.status == MODEL_FAILS and result.model.blocker is not None
            and result.model.blocker.path is not None)


def run_fix_loop(model: configured.Configured, result: ModelResult, overlay: dict[str, str],
              loop_files: dict[str, LoopFile], run_paths: set[str],
              observations: configured.Observations, session: Session, pool: WorkerPool,
              rounds: list[str]) -> ModelResult:
    """Rewrite the class that blocks ``model`` in a file of the tree outside the run, validate
    that through the model, script it again; ``rounds`` gets one line per round. Returns the
    last model job's answer."""
    for number in range(1, session.fix_rounds + 1):
        if not model_stops(result):
            break
        assert result.model is not None and result.model.blocker is not None
        blocker = result.model.blocker
        path = str(blocker.path)
        loop_file = loop_files.get(path)
        shown = loop_file.display if loop_file else configured.shown(path)
        where = f"{shown}:{blocker.line}" if blocker.line else shown
        if path in run_paths:
            rounds.append(f"round {number}: not tried: {where} is in a file of this run "
                          "(every selected rule ran on it)")
            break
        if loop_file is None:
            try:
                source = read_source(Path(path))
            except SourceError as exc:
                rounds.append(f"round {number}: blocked at {where}: {exc}; the loop stops")
                break
            loop_file = LoopFile(source, shown)
        current = loop_file.text or loop_file.source.text
        class_name = configured.class_at(current, blocker.line, blocker.scope)
        function = (configured.function_at(current, blocker.line, blocker.scope)
                    if class_name is None else None)
        if class_name is None and function is None:
            rounds.append(f"round {number}: blocked at {where}, outside any class or "
                          "module-level function; the loop stops")
            break
        # A function is rewritten as compiled from another file (annotate's entries), its
        # change reported under function_change_name: the model's verdict is its verdict.
        owner = class_name if class_name is not None else function_change_name(str(function))
        if owner in loop_file.classes | {function_change_name(f) for f in loop_file.functions}:
            rounds.append(f"round {number}: blocked at {where} in {owner}, which the "
                          "loop rewrote already; the loop stops")
            break
        chosen = loop_file.classes | ({class_name} if class_name is not None else set())
        functions = loop_file.functions | ({function} if function is not None else set())
        owners = {function_change_name(f) for f in functions}
        others = frozenset(configured.top_level_classes(loop_file.source.text)) - chosen
        skip = skip_set_of(dict.fromkeys(session.rule_names, others))
        try:
            text, classes, _ = session.settings.rewrite(
                loop_file.source.text, shown, observations.types.get(path, {}), skip,
                frozenset(functions))
        except Exception as exc:
            rounds.append(f"round {number}: rewriting {owner} in {shown} failed: "
                          f"{internal_error(shown, exc)}; the loop stops")
            break
        changed = [c for c in classes if c.class_name == owner]
        if not changed:
            rounds.append(f"round {number}: blocked at {where} in {owner}; no selected "
                          "rule changes it; the loop stops")
            break
        wanted = [configured.model_class(Path(path), name, group)
                  for name, group in by_class(classes).items() if name not in owners]
        trial_overlay = {**overlay, **{p: f.text for p, f in loop_files.items() if f.text},
                         path: text}
        answer = pool.models([configured.model_job(0, model, session, overlay=trial_overlay,
                                                   classes=wanted)],
                             timeout=session.timeout).get(0)
        if answer is None or answer.failure is not None:
            why = answer.failure if answer is not None else "no answer from the worker"
            rounds.append(f"round {number}: {owner} rewritten, not validated ({why}); "
                          "the loop stops")
            break
        answer = configured.located(answer, trial_overlay, session.target)
        verdicts = {found.verdict.name: found.verdict for found in answer.classes
                    if found.path == path}
        verdicts.update({name: _function_verdict(name, answer, shown) for name in owners})
        judged = [c if c.reason else replace(
                      c, reason=f"not validated: the fix loop rewrote {shown} "
                                f"for model {model.display}, which does not reach this class; "
                                "give it an example table")
                  for c in configured.with_verdicts(classes, verdicts)]
        bad = [c for c in judged if c.class_name == owner and (
            c.verdict == REJECTED or (session.require_verified and c.verdict != VERIFIED))]
        rules = ", ".join(dict.fromkeys(c.rule for c in changed))
        if bad:
            rounds.append(f"round {number}: blocked at {where} in {owner}; the rewrite "
                          f"by {rules} is {bad[0].verdict}: {bad[0].reason}; not kept, the "
                          "loop stops")
            break
        verdict = verdicts.get(owner)
        if (model_stops(answer) and (verdict is None or verdict.verdict != VERIFIED)
                and _blocked_in(answer, path, class_name, function, text)):
            # Not proven, and the model stops in the same place: the rewrite got it nowhere.
            rounds.append(f"round {number}: blocked at {where} in {owner}; the rewrite by "
                          f"{rules} leaves the model stopping in {owner}: not kept, the "
                          "loop stops")
            break
        if class_name is not None:
            loop_file.classes.add(class_name)
        if function is not None:
            loop_file.functions.add(function)
        loop_file.text = text
        loop_file.results = judged
        loop_files[path] = loop_file
        status = answer.model.status if answer.model else "not checked"
        works = "exports" if session.target == "export" else "scripts"
        rounds.append(f"round {number}: blocked at {where} in {owner}; rewritten by "
                      f"{rules} ({verdict.verdict if verdict else UNVERIFIED}); the model now "
                      f"{works if status == MODEL_SCRIPTS else status}")
        result = answer
    return result
