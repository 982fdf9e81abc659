"""The progress display: redrawn on a terminal, sparse plain lines in a log, ETA from rate."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tsfix.cli.progress import LOG_INTERVAL_S, ProgressDisplay, describe
from tsfix.codemods.pipeline import models as configured
from tsfix.codemods.pipeline import phases
from tsfix.codemods.pipeline.config import Config, ExampleSpec
from tsfix.codemods.pipeline.engine import Progress
from tsfix.codemods.pipeline.phases.explain import explain_blockers
from tsfix.codemods.pipeline.phases.processes import Rewriters
from tsfix.codemods.validation.protocol import MODEL_FAILS, Blocker, ModelResult, ModelVerdict


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_describe_gives_counts_and_eta() -> None:
    progress = Progress("validate", 10, 40, rewrites=45,
                        verdicts={"verified": 8, "rejected": 1, "unverified": 1})
    assert describe(progress, elapsed=20.0) == (
        "validating 10/40 classes | 45 class rewrites | 8 verified, 1 rejected, 1 unverified"
        " | ETA 1m00s")
    assert describe(Progress("rewrite", 3, 3, rewrites=1), elapsed=0.25) == (
        "rewriting 3/3 files | 1 class rewrite | took 0.2s")


def test_terminal_redraws_one_line_per_phase() -> None:
    stream, clock = io.StringIO(), Clock()
    display = ProgressDisplay(stream, terminal=True, clock=clock)
    for done in range(0, 5):
        clock.now += 1
        display(Progress("rewrite", done, 4, rewrites=done))
    display(Progress("validate", 0, 2))
    clock.now += 1
    display(Progress("validate", 1, 2, verdicts={"verified": 1}))
    display.close()

    text = stream.getvalue()
    lines = text.split("\n")
    # The rewrite phase ends on its own line; the unfinished validate line is closed.
    assert lines[0].endswith("rewriting 4/4 files | 4 class rewrites | took 4s")
    assert lines[0].count("\r\x1b[K") == 5
    assert "validating 1/2 classes" in lines[1] and "ETA 1s" in lines[1]
    assert text.endswith("\n")


def test_terminal_redraw_is_throttled() -> None:
    stream, clock = io.StringIO(), Clock()
    display = ProgressDisplay(stream, terminal=True, clock=clock)
    for done in range(0, 1000):
        display(Progress("rewrite", done, 1000))        # the clock does not move
    display(Progress("rewrite", 1000, 1000))
    assert stream.getvalue().count("\r") == 2            # first draw and the finished line


def test_log_output_is_sparse() -> None:
    stream, clock = io.StringIO(), Clock()
    display = ProgressDisplay(stream, terminal=False, clock=clock)
    # A short phase writes nothing at all.
    for done in range(0, 11):
        display(Progress("rewrite", done, 10))
    assert stream.getvalue() == ""
    # A long one writes every LOG_INTERVAL_S, then its last line; no control characters.
    for done in range(0, 31):
        clock.now += LOG_INTERVAL_S / 4
        display(Progress("validate", done, 30))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 8 and "\r" not in stream.getvalue()
    assert lines[-1].startswith("validating 30/30 classes")


# ---- the phase that explains where configured models stop --------------------------------------

def _stopped(path: str, message: str, scope: str) -> ModelResult:
    blocker = Blocker(path, 3, scope, message)
    return ModelResult(0, ModelVerdict(MODEL_FAILS, "does not script", False, blocker))


def test_blockers_are_explained_once_each_with_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Explaining runs `tsfix check` on the blocker's file (seconds on a large one): models
    # stopped at one place share one explanation, and the phase reports its progress.
    path = str(tmp_path / "nets.py")
    seen: list[tuple[str | None, str, str | None]] = []

    def explain(blocker: Blocker, text: str | None, shown: str, target: str = "",
                rejected: object = None) -> str:
        seen.append((text, blocker.message, blocker.scope))
        return f"explained {blocker.scope} in {shown}"

    monkeypatch.setattr(configured, "explain_blocker", explain)
    reports: list[Progress] = []
    session = phases.Session(["annotate"], Config(), False, False, workers=1,
                             progress=reports.append)
    file = phases.File(0, Path(path), Path(path), "nets.py")
    finished = [(configured.Configured(file, name, ExampleSpec(f"nets.py:{name}")),
                 _stopped(path, message, scope), [], "text")
                for name, message, scope in [("A", "bad kwargs", "Block.forward"),
                                             ("B", "bad kwargs", "Block.forward"),
                                             ("C", "no numpy", "Head.forward")]]
    finished.append((configured.Configured(file, "D", ExampleSpec("nets.py:D")),
                     ModelResult(0, failure="the original does not build"), [], None))

    with Rewriters(session) as rewriters:
        found = explain_blockers(finished, {path: "nets.py"}, session, rewriters)

    assert sorted(seen) == [("text", "bad kwargs", "Block.forward"),
                            ("text", "no numpy", "Head.forward")]
    assert found == {(path, "text", "bad kwargs", "Block.forward"):
                     "explained Block.forward in nets.py",
                     (path, "text", "no numpy", "Head.forward"):
                     "explained Head.forward in nets.py"}
    assert [(p.phase, p.done, p.total) for p in reports] == [("explain", 0, 1),
                                                            ("explain", 1, 1)]
    assert describe(reports[-1], 2.0) == "explaining where models stop 1/1 files | took 2s"


def test_a_blocker_is_explained_knowing_which_rewrites_of_its_class_were_rejected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # explain must not send the user to a rule whose rewrite of that class this run rejected.
    path = str(tmp_path / "nets.py")
    seen: dict[str | None, object] = {}

    def explain(blocker: Blocker, text: str | None, shown: str, target: str = "",
                rejected: object = None) -> str:
        seen[blocker.scope] = rejected
        return "explained"

    monkeypatch.setattr(configured, "explain_blocker", explain)
    session = phases.Session(["annotate"], Config(), False, False, workers=1)
    file = phases.File(0, Path(path), Path(path), "nets.py")
    finished = [(configured.Configured(file, name, ExampleSpec(f"nets.py:{name}")),
                 _stopped(path, "bad kwargs", scope), [], "text")
                for name, scope in [("A", "Block.forward"), ("B", "Head.forward")]]

    with Rewriters(session) as rewriters:
        explain_blockers(finished, {path: "nets.py"}, session, rewriters,
                         rejected={path: {"Block": {"annotate": "does not script"}}})

    assert seen == {"Block.forward": {"annotate": "does not script"}, "Head.forward": None}
