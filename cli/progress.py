"""The progress display of ``tsfix apply``: one redrawn line on a terminal, sparse lines in logs.

On a terminal the current phase is redrawn in place at most ten times a second, and each phase
ends on its own finished line. When stderr is not a terminal (CI logs, pipes), a plain line is
written at most every ``LOG_INTERVAL_S`` seconds, plus the phase's last line if any was written,
so short runs add nothing to a log and long ones show they are alive.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from tsfix.codemods.pipeline.engine import Progress
from tsfix.codemods.pipeline.report import REJECTED, UNVERIFIED, VERIFIED

REDRAW_INTERVAL_S = 0.1
LOG_INTERVAL_S = 10.0

_UNITS = {"observe": "models", "rewrite": "files", "validate": "classes", "trials": "trials",
          "recheck": "trials", "final": "files", "models": "models", "fix": "models",
          "explain": "files"}
# Rule-drop trials: each rejected class is rewritten without each of its rules ("trials"),
# then validated so ("recheck"); "final": files rewritten again without what was held back.
_LABELS = {"observe": "observing", "rewrite": "rewriting", "validate": "validating",
           "trials": "rewriting without each rule", "recheck": "rechecking",
           "final": "leaving rejected rewrites out", "models": "scripting configured models",
           "fix": "repair loop", "explain": "explaining where models stop"}


def describe(progress: Progress, elapsed: float) -> str:
    """``validating 10/45 classes | 8 verified, 1 rejected, 1 unverified | ETA 30s``."""
    label = ("exporting configured models" if progress.phase == "models"
             and progress.target == "export" else _LABELS[progress.phase])
    parts = [f"{label} {progress.done}/{progress.total} {_UNITS[progress.phase]}"]
    if progress.phase == "rewrite" or progress.rewrites:
        parts.append(f"{progress.rewrites} class rewrite{'s' if progress.rewrites != 1 else ''}")
    if progress.verdicts:
        parts.append(", ".join(f"{progress.verdicts.get(v, 0)} {v}"
                               for v in (VERIFIED, REJECTED, UNVERIFIED)))
    if 0 < progress.done < progress.total and elapsed > 0:
        parts.append(f"ETA {_duration(elapsed / progress.done * (progress.total - progress.done))}")
    elif progress.done == progress.total:
        parts.append(f"took {_duration(elapsed)}")
    return " | ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class ProgressDisplay:
    """Receives :class:`Progress` from the engine; ``close()`` when the run is over."""

    def __init__(self, stream: TextIO, *, terminal: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.terminal = terminal
        self.clock = clock
        self._phase: str | None = None
        self._started = 0.0
        self._last_write = float("-inf")
        self._wrote_in_phase = False
        self._open_line = False

    def __call__(self, progress: Progress) -> None:
        now = self.clock()
        if progress.phase != self._phase:
            self._end_line()
            self._phase, self._started = progress.phase, now
            self._wrote_in_phase = False
            self._last_write = now if not self.terminal else float("-inf")
        finished = progress.done >= progress.total
        interval = REDRAW_INTERVAL_S if self.terminal else LOG_INTERVAL_S
        if not finished and now - self._last_write < interval:
            return
        if finished and not self.terminal and not self._wrote_in_phase:
            return
        self._last_write = now
        text = describe(progress, now - self._started)
        if self.terminal:
            self.stream.write(f"\r\x1b[K{text}")
            self._open_line = not finished
            if finished:
                self.stream.write("\n")
        else:
            self.stream.write(text + "\n")
            self._wrote_in_phase = True
        self.stream.flush()

    def close(self) -> None:
        self._end_line()

    def _end_line(self) -> None:
        if self._open_line:
            self.stream.write("\n")
            self.stream.flush()
            self._open_line = False
