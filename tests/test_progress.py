"""The progress display: redrawn on a terminal, sparse plain lines in a log, ETA from rate."""

from __future__ import annotations

import io

from tsfix.cli.progress import LOG_INTERVAL_S, ProgressDisplay, describe
from tsfix.codemods.pipeline.engine import Progress


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
